/**
 * The soak benchmark's reading of answers (scripts/soakOutcome.ts): SSE payloads across chunk
 * boundaries, what a payload says, and a request's outcome from what was seen.
 */
import { describe, expect, test } from "bun:test";
import { SseParser, jsonOutcome, readPayload, streamOutcome } from "../../scripts/soakOutcome.ts";

describe("SseParser", () => {
  test("payloads split anywhere, CRLF and comments", () => {
    const body = 'data: {"a":1}\r\n\r\n: keep-alive\n\nevent: x\ndata: line one\ndata: line two\n\ndata: [DONE]\n\n';
    for (let cut = 0; cut <= body.length; cut++) {
      const parser = new SseParser();
      const payloads = [...parser.push(body.slice(0, cut)), ...parser.push(body.slice(cut))];
      expect(payloads).toEqual(['{"a":1}', "line one\nline two", "[DONE]"]);
      expect(parser.pending).toBe(false);
    }
  });

  test("an event without its blank line is pending, not a payload", () => {
    const parser = new SseParser();
    expect(parser.push('data: {"choices":[]}\n')).toEqual([]);
    expect(parser.pending).toBe(true);
  });
});

describe("readPayload", () => {
  test("the role chunk has no content; a delta, a message and a completion text do", () => {
    expect(readPayload(JSON.stringify({ choices: [{ index: 0, delta: { role: "assistant", content: "" } }] })).hasContent).toBe(false);
    expect(readPayload(JSON.stringify({ choices: [{ index: 0, delta: {} }, { index: 1, delta: { content: "x" } }] })).hasContent).toBe(true);
    expect(readPayload(JSON.stringify({ choices: [{ message: { role: "assistant", content: "hi" } }] })).hasContent).toBe(true);
    expect(readPayload(JSON.stringify({ choices: [{ text: "hi" }] })).hasContent).toBe(true);
    expect(readPayload(JSON.stringify({ choices: [{ text: "" }] })).hasContent).toBe(false);
  });

  test("[DONE], error events, queue_ms, unreadable payloads", () => {
    expect(readPayload("[DONE]")).toMatchObject({ done: true, error: false });
    expect(readPayload(JSON.stringify({ error: { message: "boom", code: 500 } }))).toMatchObject({ done: false, error: true });
    expect(readPayload(JSON.stringify({ choices: [], usage: { ctxr: { queue_ms: 12.5 } } })).queueMs).toBe(12.5);
    expect(readPayload(JSON.stringify({ choices: [], usage: { prompt_tokens: 3 } })).queueMs).toBeNull();
    expect(readPayload("{not json").unreadable).toBe(true);
    expect(readPayload("42").unreadable).toBe(true);
  });
});

describe("outcomes", () => {
  test("streams: error event first, then [DONE], then our hang-up, else cut", () => {
    expect(streamOutcome({ sawDone: true, errorEvents: 1, end: "end" })).toBe("error_event");
    expect(streamOutcome({ sawDone: true, errorEvents: 0, end: "end" })).toBe("completed");
    expect(streamOutcome({ sawDone: false, errorEvents: 0, end: "aborted" })).toBe("hangup");
    expect(streamOutcome({ sawDone: false, errorEvents: 0, end: "end" })).toBe("cut");
    expect(streamOutcome({ sawDone: false, errorEvents: 0, end: "reset" })).toBe("cut");
  });

  test("JSON answers: status, completed, error, cut", () => {
    expect(jsonOutcome(400, '{"error":{}}')).toBe("status");
    expect(jsonOutcome(200, JSON.stringify({ choices: [{ message: { content: "x" } }] }))).toBe("completed");
    expect(jsonOutcome(200, JSON.stringify({ error: { message: "failed" } }))).toBe("error_event");
    expect(jsonOutcome(200, '{"choices": [')).toBe("cut");
    expect(jsonOutcome(200, null)).toBe("cut");
  });
});
