import { describe, expect, test } from "bun:test";
import { crc32 } from "../../../src/online/journal/crc32.ts";
import { ByteBuffer, encodeFrame, frameBytes, parseFrames } from "../../../src/online/journal/framing.ts";
import { seededRandom } from "../../../src/index/seededRandom.ts";
import { crc32 as zlibCrc32 } from "node:zlib";

const text = (s: string) => new TextEncoder().encode(s);

describe("crc32", () => {
  test("matches the standard check values", () => {
    expect(crc32(text(""))).toBe(0);
    expect(crc32(text("123456789"))).toBe(0xcbf43926);
    expect(crc32(text("The quick brown fox jumps over the lazy dog"))).toBe(0x414fa339);
  });

  test("agrees with zlib's crc32 on random bytes, and on sub-ranges", () => {
    const random = seededRandom(7);
    for (let n = 0; n < 200; n++) {
      const bytes = Uint8Array.from({ length: Math.floor(random() * 2000) }, () => Math.floor(random() * 256));
      expect(crc32(bytes)).toBe(zlibCrc32(bytes));
      const start = Math.floor(random() * bytes.length);
      expect(crc32(bytes, start, bytes.length)).toBe(zlibCrc32(bytes.subarray(start)));
    }
  });
});

describe("frames", () => {
  test("encode as <crc>\\t<seq>\\t<json>\\n with the crc of <seq>\\t<json>", () => {
    const bytes = frameBytes(42, { a: "b" });
    const line = new TextDecoder().decode(bytes);
    const payload = '42\t{"a":"b"}';
    expect(line).toBe(`${crc32(text(payload)).toString(16).padStart(8, "0")}\t${payload}\n`);
  });

  test("round-trip values of every kind, including non-ASCII text and escaped newlines", () => {
    const values = [0, -1.5, "plain", "line\nbreak\ttab", "ünïcødé ✓ 😀", null, true, [], [1, [2, { x: "y" }]], { nested: { deep: [null] } }];
    const buffer = new ByteBuffer(8); // grows
    values.forEach((value, i) => encodeFrame(buffer, i + 1, JSON.stringify(value)));
    const { frames, bad } = parseFrames(buffer.view());
    expect(bad).toEqual([]);
    expect(frames.map((frame) => frame.value)).toEqual(values);
    expect(frames.map((frame) => frame.seq)).toEqual(values.map((_, i) => i + 1));
    expect(frames[frames.length - 1]!.end).toBe(buffer.length);
    for (let i = 1; i < frames.length; i++) expect(frames[i]!.offset).toBe(frames[i - 1]!.end);
  });

  test("a frame without its newline is a torn tail", () => {
    const one = frameBytes(1, { id: 1 });
    const two = frameBytes(2, { id: 2 });
    const file = new Uint8Array([...one, ...two.subarray(0, two.length - 1)]);
    const { frames, bad } = parseFrames(file);
    expect(frames.map((frame) => frame.seq)).toEqual([1]);
    expect(bad).toEqual([{ offset: one.length, bytes: two.length - 1, reason: "torn tail" }]);
  });

  test("a changed byte anywhere in a frame is detected", () => {
    const frame = frameBytes(7, { id: 7, text: "some words" });
    for (let i = 0; i < frame.length - 1; i++) {
      for (const xor of [0x01, 0x20, 0x80]) {
        const damaged = frame.slice();
        damaged[i]! ^= xor;
        if (damaged[i] === 0x0a) continue; // splits the line: covered by the line tests
        const { frames, bad } = parseFrames(damaged);
        expect(frames).toEqual([]);
        expect(bad.length).toBe(1);
        expect(["checksum mismatch", "malformed frame"]).toContain(bad[0]!.reason);
      }
    }
  });

  test("reasons: checksum mismatch for a bad sum, malformed frame for a bad layout", () => {
    const good = frameBytes(3, [1, 2]);
    const badSum = good.slice();
    badSum[0] = badSum[0] === 0x30 ? 0x31 : 0x30;
    expect(parseFrames(badSum).bad[0]!.reason).toBe("checksum mismatch");
    for (const line of ["\n", "garbage\n", "zzzzzzzz\t1\t{}\n", "\0\0\0\0\0\0\0\0\0\0\0\0\n"]) {
      expect(parseFrames(text(line)).bad[0]!.reason).toBe("malformed frame");
    }
    // A correct checksum over something that is not `<seq>\t<json>`:
    for (const payload of ["x\t{}", "12{}", "5\t{not json"]) {
      const sum = crc32(text(payload)).toString(16).padStart(8, "0");
      expect(parseFrames(text(`${sum}\t${payload}\n`)).bad[0]!.reason).toBe("malformed frame");
    }
  });

  test("bad lines between good ones are reported and the good ones kept", () => {
    const file = new Uint8Array([...frameBytes(1, "a"), ...text("junk line\n"), ...frameBytes(2, "b")]);
    const { frames, bad } = parseFrames(file);
    expect(frames.map((frame) => frame.value)).toEqual(["a", "b"]);
    expect(bad).toEqual([{ offset: frameBytes(1, "a").length, bytes: 10, reason: "malformed frame" }]);
  });

  test("random bytes never throw", () => {
    const random = seededRandom(11);
    for (let n = 0; n < 300; n++) {
      const bytes = Uint8Array.from({ length: Math.floor(random() * 300) }, () => (random() < 0.1 ? 0x0a : random() < 0.2 ? 0x09 : Math.floor(random() * 256)));
      const { frames, bad } = parseFrames(bytes);
      expect(frames.length + bad.length).toBeGreaterThanOrEqual(bytes.length > 0 ? 1 : 0);
    }
  });

  test("seqs must be safe non-negative integers", () => {
    expect(() => frameBytes(-1, 1)).toThrow(RangeError);
    expect(() => frameBytes(1.5, 1)).toThrow(RangeError);
    expect(() => frameBytes(1, undefined)).toThrow(TypeError);
  });
});
