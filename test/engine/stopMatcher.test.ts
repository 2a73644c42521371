import { describe, expect, test } from "bun:test";
import { Xoshiro128 } from "../../src/model/normalRandom.ts";
import { StopMatcher } from "../../src/engine/stopMatcher.ts";

/** Feeds chunks; returns what was sent and whether it stopped (flushing when it did not). */
function run(stops: string[], chunks: string[]): { sent: string[]; stopped: boolean } {
  const matcher = new StopMatcher(stops);
  const sent: string[] = [];
  for (const chunk of chunks) {
    const result = matcher.push(chunk);
    sent.push(result.text);
    if (result.stopped) return { sent, stopped: true };
  }
  sent.push(matcher.flush());
  return { sent, stopped: false };
}

/** What the whole text gives: the text before the first stop string, and whether one occurs. */
function reference(stops: string[], text: string): { text: string; stopped: boolean } {
  let first = -1;
  for (const stop of stops) {
    if (stop.length === 0) continue;
    const at = text.indexOf(stop);
    if (at !== -1 && (first === -1 || at < first)) first = at;
  }
  return first === -1 ? { text, stopped: false } : { text: text.slice(0, first), stopped: true };
}

describe("StopMatcher", () => {
  test("no stop strings: text passes straight through", () => {
    expect(run([], ["a", "b"]).sent).toEqual(["a", "b", ""]);
    expect(run([""], ["a"]).sent).toEqual(["a", ""]);
  });

  test("text that cannot begin a stop string is sent at once", () => {
    expect(run(["END"], ["hello ", "world"]).sent).toEqual(["hello ", "world", ""]);
  });

  test("a possible beginning is held back, then sent when the next text rules it out", () => {
    const matcher = new StopMatcher(["END"]);
    expect(matcher.push("abcE")).toEqual({ text: "abc", stopped: false });
    expect(matcher.push("N")).toEqual({ text: "", stopped: false });
    expect(matcher.push("x")).toEqual({ text: "ENx", stopped: false });
    expect(matcher.push("E")).toEqual({ text: "", stopped: false });
    expect(matcher.flush()).toBe("E");
    expect(matcher.stopped).toBe(false);
  });

  test("a stop string split across chunks: the text before it, not the stop string", () => {
    const matcher = new StopMatcher(["END"]);
    expect(matcher.push("abcE")).toEqual({ text: "abc", stopped: false });
    expect(matcher.push("N")).toEqual({ text: "", stopped: false });
    expect(matcher.push("Dmore")).toEqual({ text: "", stopped: true });
    expect(matcher.stopped).toBe(true);
    expect(matcher.matched).toBe("END");
    // After stopping nothing more comes out.
    expect(matcher.push("x")).toEqual({ text: "", stopped: true });
    expect(matcher.flush()).toBe("");
  });

  test("include_stop_str_in_output: the text ends with the stop string that ended it", () => {
    const matcher = new StopMatcher(["END", "STOP"], true);
    expect(matcher.push("abcE")).toEqual({ text: "abc", stopped: false });
    expect(matcher.push("NDmore")).toEqual({ text: "END", stopped: true });
    expect(new StopMatcher(["\n\n"], true).push("para one\n\npara two")).toEqual({ text: "para one\n\n", stopped: true });
  });

  test("a stop string inside one chunk", () => {
    expect(new StopMatcher(["\n\n"]).push("para one\n\npara two")).toEqual({ text: "para one", stopped: true });
    expect(new StopMatcher(["stop"]).push("stop")).toEqual({ text: "", stopped: true });
  });

  test("several stop strings: the earliest match wins, overlapping prefixes are held", () => {
    const matcher = new StopMatcher(["</answer>", "<|end|>", "##"]);
    expect(matcher.push("x <")).toEqual({ text: "x ", stopped: false });
    expect(matcher.push("|en")).toEqual({ text: "", stopped: false });
    expect(matcher.push("d|> ## </answer>")).toEqual({ text: "", stopped: true });
    expect(matcher.matched).toBe("<|end|>");
    const later = new StopMatcher(["bc", "abcd"]);
    expect(later.push("xab")).toEqual({ text: "x", stopped: false });
    // "abcd" starts before "bc": nothing of it is sent.
    expect(later.push("cd")).toEqual({ text: "", stopped: true });
    expect(later.matched).toBe("abcd");
  });

  test("a held tail that restarts a stop string partway", () => {
    // "aab": the held "aa" is not a beginning of "aab" past its first "a".
    const matcher = new StopMatcher(["aab"]);
    expect(matcher.push("xaa")).toEqual({ text: "x", stopped: false });
    expect(matcher.push("a")).toEqual({ text: "a", stopped: false });
    expect(matcher.push("b")).toEqual({ text: "", stopped: true });
  });

  test("non-ASCII stop strings and text", () => {
    expect(run(["。\n"], ["日本語。", "\n次"])).toEqual({ sent: ["日本語", ""], stopped: true });
    expect(run(["🎉"], ["a🎉b"])).toEqual({ sent: ["a"], stopped: true });
  });

  test("random chunkings agree with matching the whole text, and text is sent as early as possible", () => {
    const random = new Xoshiro128(5);
    const pick = (n: number) => random.nextUint32() % n;
    const alphabet = "ab<>/|x";
    const word = (length: number) => Array.from({ length }, () => alphabet[pick(alphabet.length)]).join("");
    for (let round = 0; round < 2000; round++) {
      const stops = Array.from({ length: pick(5) }, () => word(1 + pick(4)));
      const text = word(pick(30));
      const chunks: string[] = [];
      for (let at = 0; at < text.length; ) {
        const size = 1 + pick(5);
        chunks.push(text.slice(at, at + size));
        at += size;
      }
      const { sent, stopped } = run(stops, chunks);
      const expected = reference(stops, text);
      expect({ text: sent.join(""), stopped }).toEqual(expected);
      // Nothing is held that could not begin a stop string: after each chunk, what is
      // unsent is a proper prefix of some stop string (or empty).
      if (!stopped) {
        const matcher = new StopMatcher(stops);
        let pushed = "";
        let out = "";
        for (const chunk of chunks) {
          pushed += chunk;
          out += matcher.push(chunk).text;
          const held = pushed.slice(out.length);
          expect(pushed.startsWith(out)).toBe(true);
          expect(held === "" || stops.some((stop) => stop.length > held.length && stop.startsWith(held))).toBe(true);
        }
      }
    }
  });
});
