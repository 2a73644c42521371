import { describe, expect, test } from "bun:test";
import { contextBlocks } from "../../src/index/contextSet.ts";
import { hashBlockText } from "../../src/index/blockText.ts";
import { ContextsJsonlError, formatContextLine, parseContextsJsonl } from "../../src/index/contextsJsonl.ts";
import { normalizeBlock } from "../../src/online/blocks.ts";

function parseError(text: string, options = {}): ContextsJsonlError {
  try {
    parseContextsJsonl(text, { source: "contexts.jsonl", ...options });
  } catch (error) {
    expect(error).toBeInstanceOf(ContextsJsonlError);
    return error as ContextsJsonlError;
  }
  throw new Error("expected a parse error");
}

describe("parseContextsJsonl", () => {
  test("arrays and objects, integer and string ids, blank lines skipped", () => {
    const text = '[1, 2, 3]\n\n   \n{"id": "q7", "blocks": ["a", 2]}\r\n{"blocks": [3, "1"], "extra": true}\n';
    const { set, ids, lines } = parseContextsJsonl(text);
    expect(set.size).toBe(3);
    expect(ids).toEqual([0, "q7", 4]); // a missing id is the 0-based line number
    expect(Array.from(lines)).toEqual([1, 4, 5]);
    // 1 and "1" are different blocks; 2 and 3 are interned once.
    expect(set.blockIds).toEqual([1, 2, 3, "a", "1"]);
    expect(Array.from(contextBlocks(set, 1))).toEqual([3, 1]);
    expect(Array.from(contextBlocks(set, 2))).toEqual([2, 4]);
  });

  test("numeric ids are kept; a missing id is the 0-based line number, blank lines included", () => {
    const { ids } = parseContextsJsonl('\n\n{"id": 17, "blocks": [1]}\n[2]\n{"id": 0.5, "blocks": [3]}');
    expect(ids).toEqual([17, 3, 0.5]);
  });

  test("text blocks as the online API takes them: a text without an id is named by its normalized text's hash", () => {
    const text = [
      JSON.stringify([{ text: "Paris is  the capital." }, { id: "d2", text: "ignored for identity" }, 7]),
      JSON.stringify({ id: "q", blocks: [{ text: " Paris is the\ncapital. ", tokens: 12 }, { id: 7 }, "d2"] }),
    ].join("\n");
    const { set, blockObjects } = parseContextsJsonl(text);
    const label = `text:${hashBlockText("Paris is the capital.")}`;
    expect(label).toMatch(/^text:[0-9a-f]{32}$/);
    // The same text (whitespace aside) is one block, {"id": 7} is block 7, {"id": "d2"} is "d2".
    expect(set.blockIds).toEqual([label, "d2", 7]);
    expect(Array.from(contextBlocks(set, 1))).toEqual([0, 2, 1]);
    // Each object block keeps the object it was first written as.
    expect(blockObjects[0]).toEqual({ text: "Paris is  the capital." });
    expect(blockObjects[1]).toEqual({ id: "d2", text: "ignored for identity" });
    expect(blockObjects[2]).toBeUndefined(); // first written as 7
    // The online API names the same text block the same way.
    expect(normalizeBlock({ text: "Paris is the capital." }, { blockTokens: 256 }).label).toBe(label);
  });

  test("a text block repeated inside one context is refused like a repeated id", () => {
    expect(parseError('[{"text": "a b"}, {"text": "a  b"}]\n').message).toMatch(/^contexts\.jsonl:1: block "text:[0-9a-f]{32}" appears twice in one context$/);
  });

  const objectCases: [string, string, RegExp][] = [
    ["no id nor text", '[{"tokens": 5}]', /^contexts\.jsonl:1: position 1: an object is not a block id unless it has an "id" or a "text"$/],
    ["unknown field", '[1, {"text": "x", "title": "t"}]', /^contexts\.jsonl:1: position 2: unknown block field "title"/],
    ["bad id", '[{"id": 1.5}]', /^contexts\.jsonl:1: position 1: "id" must be an integer or a string, got 1\.5$/],
    ["bad text", '[{"text": 3}]', /^contexts\.jsonl:1: position 1: "text" must be a string, got 3$/],
    ["bad tokens", '[{"text": "x", "tokens": 0}]', /^contexts\.jsonl:1: position 1: "tokens" must be a positive integer, got 0$/],
    ["huge id", '[{"id": 9007199254740993}]', /^contexts\.jsonl:1: position 1: block id 9007199254740992 is too large to be exact/],
  ];
  for (const [name, text, message] of objectCases) {
    test(`block object: ${name}`, () => {
      expect(parseError(text).message).toMatch(message);
    });
  }

  test("a byte-order mark and a last line without newline are fine", () => {
    const { set } = parseContextsJsonl("\uFEFF[1]\n[2]");
    expect(set.size).toBe(2);
  });

  const cases: [string, string, RegExp][] = [
    ["malformed JSON", "[1, 2]\n[1, 2\n", /^contexts\.jsonl:2: malformed JSON/],
    ["not an array or object", "[1]\n\n42\n", /^contexts\.jsonl:3: expected a JSON array of block ids or an object with a "blocks" array, got 42$/],
    ["a string line", '"abc"\n', /^contexts\.jsonl:1: expected .* got "abc"$/],
    ["null line", "null\n", /^contexts\.jsonl:1: expected .* got null$/],
    ["object without blocks", '{"id": 1}\n', /^contexts\.jsonl:1: object has no "blocks" array$/],
    ["blocks not an array", '{"blocks": "abc"}\n', /^contexts\.jsonl:1: "blocks" must be an array of block ids, got "abc"$/],
    ["float block", "[1, 2.5]\n", /^contexts\.jsonl:1: position 2: 2\.5 is not a block id \(an integer or a string\)$/],
    ["null block", "[null]\n", /^contexts\.jsonl:1: position 1: null is not a block id/],
    ["boolean block", "[1, true]\n", /^contexts\.jsonl:1: position 2: true is not a block id/],
    ["nested block", "[[1], 2]\n", /^contexts\.jsonl:1: position 1: an array is not a block id/],
    ["object block", '[{"a": 1}]\n', /^contexts\.jsonl:1: position 1: an object is not a block id/],
    ["huge integer", "[12345678901234567890]\n", /^contexts\.jsonl:1: position 1: block id .* too large/],
    ["empty context", "[1]\n[]\n", /^contexts\.jsonl:2: empty context \(no blocks\)$/],
    ["empty blocks in object", '[1]\n{"blocks": []}\n', /^contexts\.jsonl:2: empty context/],
    ["repeated block", "[1]\n\n[3, 42, 5, 42]\n", /^contexts\.jsonl:3: block 42 appears twice in one context$/],
    ["repeated string block", '["x", "y", "x"]\n', /^contexts\.jsonl:1: block "x" appears twice in one context$/],
    ["bad id", '{"id": null, "blocks": [1]}\n', /^contexts\.jsonl:1: "id" must be a string or a number, got null$/],
    ["no contexts", "\n  \n\n", /^contexts\.jsonl: no contexts/],
    ["empty input", "", /^contexts\.jsonl: no contexts/],
  ];
  for (const [name, text, message] of cases) {
    test(`error: ${name}`, () => {
      const error = parseError(text);
      expect(error.message).toMatch(message);
      expect(error.source).toBe("contexts.jsonl");
    });
  }

  test("error line numbers count blank lines", () => {
    expect(parseError("\n\n\n[1, 1]\n").line).toBe(4);
    expect(parseError("\n\n").line).toBe(0);
  });

  test("the same block in different contexts is fine", () => {
    expect(parseContextsJsonl("[1, 2]\n[2, 1]\n[1]").set.size).toBe(3);
  });

  test("simulator mode accepts empty contexts and repeated blocks", () => {
    const { set } = parseContextsJsonl("[]\n[1, 1]\n", { allowEmpty: true, allowRepeats: true });
    expect(set.size).toBe(2);
    expect(Array.from(contextBlocks(set, 1))).toEqual([0, 0]);
  });

  test("formatContextLine writes id, blocks and extras", () => {
    expect(formatContextLine("a", [1, "x"], { path: [0, 1] })).toBe('{"id":"a","blocks":[1,"x"],"path":[0,1]}');
  });
});
