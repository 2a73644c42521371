import { describe, expect, test } from "bun:test";
import { UTF8_COMPLETE, Utf8TokenTable, afterBytes } from "../../src/engine/utf8Tokens.ts";

/** Whether bytes are well-formed UTF-8 by the platform's strict decoder (a trailing partial character allowed when `partial`). */
function wellFormed(bytes: Uint8Array, partial: boolean): boolean {
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(bytes, { stream: partial });
    return true;
  } catch {
    return false;
  }
}

describe("UTF-8 across tokens", () => {
  test("the tracker agrees with a strict decoder on every 1-3 byte sequence of interesting bytes", () => {
    const interesting = [0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf4, 0xf5, 0xff];
    let checked = 0;
    for (const a of interesting)
      for (const b of [null, ...interesting])
        for (const c of [null, ...interesting]) {
          if (b === null && c !== null) continue;
          const bytes = Uint8Array.from([a, ...(b === null ? [] : [b]), ...(c === null ? [] : [c])]);
          const state = afterBytes(UTF8_COMPLETE, bytes);
          expect(state !== null).toBe(wellFormed(bytes, true));
          if (state !== null) expect(state.due === 0).toBe(wellFormed(bytes, false));
          checked++;
        }
    expect(checked).toBeGreaterThan(10000);
  });

  test("the boundary mask forbids exactly the tokens that cannot start well-formed text", () => {
    const tokens = [[0x41], [0xe2, 0x82], [0x82, 0xac], [0xc0, 0x80], [0xf0, 0x9f, 0x98, 0x80], [], [0xed, 0xa0, 0x80]].map((b) => Uint8Array.from(b));
    const table = new Utf8TokenTable(tokens);
    const forbidden = tokens.map((_, id) => ((table.forbiddenAtBoundary[id >> 5]! >>> (id & 31)) & 1) === 1);
    expect(forbidden).toEqual([false, false, true, true, false, false, true]);
    // After "€"'s first two bytes only a continuation byte fits.
    const state = afterBytes(UTF8_COMPLETE, tokens[1]!)!;
    expect(table.isForbidden(state, 0)).toBe(true);
    expect(table.isForbidden(state, 2)).toBe(true); // 0x82 completes it, then 0xac is a stray continuation
    expect(table.isForbidden(state, 3)).toBe(true);
    const single = new Utf8TokenTable([Uint8Array.from([0xac])]);
    expect(single.isForbidden(state, 0)).toBe(false);
  });
});
