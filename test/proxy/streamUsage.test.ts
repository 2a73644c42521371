/** The pure parts of asking for a streamed answer's usage and hiding it again (src/proxy/streamUsage.ts). */
import { describe, expect, test } from "bun:test";
import { HiddenUsageFilter, hiddenUsageLine, MAX_HELD_CHARS, refusesStreamOptions, withoutTopLevelMember, withUsageRequested } from "../../src/proxy/streamUsage.ts";

describe("withUsageRequested", () => {
  test("a streamed request gets include_usage, its other stream_options kept", () => {
    expect(withUsageRequested({ model: "m", stream: true })).toEqual({ model: "m", stream: true, stream_options: { include_usage: true } });
    expect(withUsageRequested({ stream: true, stream_options: { continuous_usage_stats: false } })).toEqual({ stream: true, stream_options: { continuous_usage_stats: false, include_usage: true } });
    expect(withUsageRequested({ stream: true, stream_options: { include_usage: false } })).toEqual({ stream: true, stream_options: { include_usage: true } });
  });

  test("nothing to add: not streamed, or the client asked", () => {
    expect(withUsageRequested({ stream: false })).toBeNull();
    expect(withUsageRequested({})).toBeNull();
    expect(withUsageRequested({ stream: true, stream_options: { include_usage: true } })).toBeNull();
  });
});

test("refusesStreamOptions: a 400/422 that names the option", () => {
  expect(refusesStreamOptions(400, '{"error":{"message":"Unrecognized request argument supplied: stream_options"}}')).toBe(true);
  expect(refusesStreamOptions(422, '{"detail":[{"loc":["body","stream_options"],"msg":"Extra inputs are not permitted"}]}')).toBe(true);
  expect(refusesStreamOptions(400, '{"error":{"message":"max_tokens too large"}}')).toBe(false);
  expect(refusesStreamOptions(500, "stream_options")).toBe(false);
});

describe("withoutTopLevelMember", () => {
  test("removes the member with its comma, every other character kept", () => {
    expect(withoutTopLevelMember('{"id":"x","choices":[],"usage":null}', "usage")).toBe('{"id":"x","choices":[]}');
    expect(withoutTopLevelMember('{"usage":{"prompt_tokens":3},"id":"x"}', "usage")).toBe('{"id":"x"}');
    expect(withoutTopLevelMember('{"a": 1, "usage": {"b": [1, {"c": "}\\"usage"}]}, "d": 2.50}', "usage")).toBe('{"a": 1, "d": 2.50}');
    expect(withoutTopLevelMember('{"usage":null}', "usage")).toBe("{}");
  });

  test("a nested usage is not a top-level member", () => {
    const text = '{"choices":[{"delta":{"usage":1}}],"x":"usage"}';
    expect(withoutTopLevelMember(text, "usage")).toBe(text);
  });
});

describe("hiddenUsageLine", () => {
  test("the usage-only chunk goes; a usage member of a content chunk goes; others pass as they are", () => {
    expect(hiddenUsageLine('data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}')).toBeNull();
    expect(hiddenUsageLine('data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}')).toBe('data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}]}');
    const content = 'data: {"id":"c","choices":[{"index":0,"delta":{"content":"the \\"usage\\" word"}}]}';
    expect(hiddenUsageLine(content)).toBe(content);
    expect(hiddenUsageLine("data: [DONE]")).toBe("data: [DONE]");
    expect(hiddenUsageLine(": keep-alive usage")).toBe(": keep-alive usage");
  });
});

describe("HiddenUsageFilter", () => {
  const upstream =
    'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}\n\n' +
    'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hé"}}],"usage":null}\n\n' +
    'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}\n\n' +
    'data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}\n\n' +
    "data: [DONE]\n\n";
  const expected =
    'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n' +
    'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hé"}}]}\n\n' +
    'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n' +
    "data: [DONE]\n\n";

  test("the stream without usage, whatever the pieces it comes in", () => {
    for (const size of [1, 3, 7, 50, upstream.length]) {
      const filter = new HiddenUsageFilter();
      let out = "";
      for (let i = 0; i < upstream.length; i += size) out += filter.push(upstream.slice(i, i + size));
      out += filter.flush();
      expect(out).toBe(expected);
    }
  });

  test("CRLF lines, and a stream that needed no change, pass byte for byte", () => {
    const filter = new HiddenUsageFilter();
    const crlf = 'data: {"choices":[],"usage":{"prompt_tokens":1}}\r\n\r\ndata: {"choices":[{"delta":{"content":"x"}}]}\r\n\r\n';
    expect(filter.push(crlf) + filter.flush()).toBe('data: {"choices":[{"delta":{"content":"x"}}]}\r\n\r\n');
    const plain = new HiddenUsageFilter();
    expect(plain.push(expected) + plain.flush()).toBe(expected);
  });
});

test("HiddenUsageFilter holds no line without bound: past MAX_HELD_CHARS a line passes on as it comes", () => {
  const filter = new HiddenUsageFilter();
  const piece = "a".repeat(64 * 1024);
  let out = "";
  let held = 0;
  for (let i = 0; i < 40; i++) {
    out += filter.push(piece);
    held = Math.max(held, (i + 1) * piece.length - out.length);
  }
  expect(held).toBeLessThanOrEqual(MAX_HELD_CHARS + piece.length);
  out += filter.push('\ndata: {"choices":[],"usage":{"prompt_tokens":1}}\n\ndata: [DONE]\n\n') + filter.flush();
  expect(out).toBe(`${piece.repeat(40)}\ndata: [DONE]\n\n`);
});
