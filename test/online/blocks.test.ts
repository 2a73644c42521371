import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { forgetHashes, normalizeBlock, normalizeWhitespace, textHash } from "../../src/online/blocks.ts";
import { collectGarbage, heapBytes } from "../../src/runtime/garbageCollector.ts";

describe("blocks", () => {
  test("whitespace normalization: trimmed, every run of whitespace one space", () => {
    expect(normalizeWhitespace("  a  b\tc\n\n d \r\n")).toBe("a b c d");
    expect(normalizeWhitespace("a b")).toBe("a b");
    expect(normalizeWhitespace("a \t b")).toBe("a b");
    for (let i = 0; i < 200; i++) {
      const chars = [" ", "\t", "\n", "x", "y", "\u00a0", "\r"];
      const text = Array.from({ length: 30 }, (_, j) => chars[(i * 7 + j * j * 3) % chars.length]).join("");
      expect(normalizeWhitespace(text)).toBe(text.trim().replace(/\s+/g, " "));
    }
  });

  test("a text hash is SHA-256 of the normalized text, the same for every spelling of its whitespace, memo or not", () => {
    const expected = createHash("sha256").update("The cat sat.").digest("hex").slice(0, 32);
    expect(textHash("The  cat\nsat.")).toBe(expected);
    expect(textHash(" The cat sat. ")).toBe(expected);
    expect(textHash("The  cat\nsat.")).toBe(expected); // from the memo
    expect(textHash("The cat sat!")).not.toBe(expected);
  });

  test("keys keep ids, strings and texts apart", () => {
    const d = { blockTokens: 7 };
    expect(normalizeBlock(1, d).key).toBe("n:1");
    expect(normalizeBlock("1", d).key).toBe("s:1");
    expect(normalizeBlock({ id: 1, text: "x", tokens: 3 }, d)).toEqual({ key: "n:1", tokens: 3, label: 1 });
    expect(normalizeBlock({ text: "abcdefgh" }, d).tokens).toBe(2);
    expect(normalizeBlock({ text: "abc" }, d).key).toStartWith("t:");
  });
});

describe("the text-hash memo", () => {
  test("does not keep the strings a block's text was cut from alive", () => {
    forgetHashes();
    collectGarbage();
    const before = heapBytes();
    for (let i = 0; i < 100; i++) {
      // A flat 2 MB string, as JSON.parse makes a proxied message, and a 1 KB document sliced out of it.
      const message = JSON.parse(JSON.stringify({ content: `message ${i} ${"x".repeat(2_000_000)}<document>doc ${i} ${"y".repeat(1000)}</document>` })).content as string;
      const at = message.indexOf("<document>");
      textHash(message.slice(at + 10, at + 1010));
    }
    collectGarbage();
    collectGarbage();
    // Held slices would keep ~200 MB; the memo's own keys are ~100 KB.
    expect(heapBytes() - before).toBeLessThan(20_000_000);
    forgetHashes();
  });
});
