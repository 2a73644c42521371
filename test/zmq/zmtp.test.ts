/** ZMTP 3.1 bytes as the RFCs lay them out: greeting, short and long frames, commands, metadata. */
import { describe, expect, test } from "bun:test";
import { FrameReader, ZmtpError, encodeCommand, encodeFrame, encodeMessage, encodeMetadata, greeting, parseCommand, parseGreeting, parseMetadata, pongCommand, readyCommand, signatureMismatch } from "../../src/zmq/zmtp.ts";

const ascii = (text: string) => Array.from(new TextEncoder().encode(text));

describe("greeting", () => {
  test("signature, version 3.1, mechanism NULL, as-server 0, filler", () => {
    const bytes = Array.from(greeting());
    expect(bytes.length).toBe(64);
    expect(bytes.slice(0, 10)).toEqual([0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f]);
    expect(bytes.slice(10, 12)).toEqual([3, 1]);
    expect(bytes.slice(12, 32)).toEqual([...ascii("NULL"), ...new Array(16).fill(0)]);
    expect(bytes.slice(32)).toEqual(new Array(32).fill(0));
    expect(parseGreeting(greeting())).toEqual({ major: 3, minor: 1, mechanism: "NULL" });
  });

  test("peers that are not ZMTP 3 are refused as soon as their bytes show it", () => {
    expect(signatureMismatch(Uint8Array.of(0xff))).toBeNull();
    expect(signatureMismatch(new TextEncoder().encode("GET / HTTP/1.1"))).toContain("not a ZMTP peer");
    expect(signatureMismatch(Uint8Array.of(0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x00))).toContain("ZMTP 1.0");
    expect(signatureMismatch(Uint8Array.of(0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 1))).toContain("ZMTP 1 peers are not supported");
    const curve = greeting();
    curve.set(new TextEncoder().encode("CURVE"), 12);
    expect(parseGreeting(curve).mechanism).toBe("CURVE");
    expect(() => parseGreeting(greeting().subarray(0, 63))).toThrow(ZmtpError);
  });
});

describe("frames", () => {
  test("short frames: flags, 1-byte size; long frames: 8-byte big-endian size", () => {
    expect(Array.from(encodeFrame(Uint8Array.of(7, 8), true))).toEqual([0x01, 2, 7, 8]);
    expect(Array.from(encodeFrame(new Uint8Array(0), false))).toEqual([0x00, 0]);
    const long = encodeFrame(new Uint8Array(256).fill(9), false);
    expect(Array.from(long.subarray(0, 9))).toEqual([0x02, 0, 0, 0, 0, 0, 0, 1, 0]);
    expect(long.length).toBe(9 + 256);
    expect(Array.from(encodeFrame(new Uint8Array(255), false).subarray(0, 2))).toEqual([0x00, 255]);
    // A multipart message: MORE on all frames but the last.
    expect(Array.from(encodeMessage([Uint8Array.of(), Uint8Array.of(1), Uint8Array.of(2, 3)]))).toEqual([0x01, 0, 0x01, 1, 1, 0x00, 2, 2, 3]);
  });

  test("the reader splits a stream cut anywhere into the same frames", () => {
    const stream = Buffer.concat([encodeMessage([Uint8Array.of(1), new Uint8Array(300).fill(4)]), encodeCommand("PING", Uint8Array.of(0, 10, 0xaa))]);
    for (const cut of [1, 2, 5, 9, 10, 304, stream.length - 1]) {
      const reader = new FrameReader(1024);
      const frames = [...reader.push(stream.subarray(0, cut)), ...reader.push(stream.subarray(cut))];
      expect(frames.map((f) => [f.body.length, f.more, f.command])).toEqual([
        [1, true, false],
        [300, false, false],
        [8, false, true],
      ]);
      expect(parseCommand(frames[2]!.body)).toEqual({ name: "PING", data: Uint8Array.of(0, 10, 0xaa) });
    }
  });

  test("frames over the limit and reserved flag bits are refused", () => {
    expect(() => new FrameReader(100).push(encodeFrame(new Uint8Array(101), false))).toThrow("over the 100-byte limit");
    expect(() => new FrameReader(100).push(Uint8Array.of(0x08, 0))).toThrow("reserved bits");
  });

  test("with skipOversized, a frame over the limit is an empty marked frame and its bytes are dropped, wherever the stream is cut", () => {
    const stream = Buffer.concat([encodeMessage([Uint8Array.of(7), new Uint8Array(5000).fill(9)]), encodeMessage([Uint8Array.of(1, 2)])]);
    for (const cuts of [[], [1], [3], [9], [12], [200, 4000], [5003], [stream.length - 2], Array.from({ length: 50 }, (_, i) => i * 101 + 1)]) {
      const reader = new FrameReader(1000, true);
      const frames: { length: number; more: boolean; oversized: boolean }[] = [];
      let from = 0;
      for (const cut of [...cuts, stream.length]) {
        for (const f of reader.push(stream.subarray(from, cut))) frames.push({ length: f.body.length, more: f.more, oversized: f.oversized === true });
        from = cut;
      }
      expect(frames).toEqual([
        { length: 1, more: true, oversized: false },
        { length: 0, more: false, oversized: true },
        { length: 2, more: false, oversized: false },
      ]);
    }
  });

  test("a large frame in many small chunks is read once it is whole", () => {
    const body = Uint8Array.from({ length: 200_000 }, (_, i) => i % 251);
    const stream = encodeFrame(body, false);
    const reader = new FrameReader(1 << 20);
    const frames = [];
    for (let at = 0; at < stream.length; at += 1000) frames.push(...reader.push(stream.subarray(at, at + 1000)));
    expect(frames.length).toBe(1);
    expect(Buffer.compare(frames[0]!.body, body)).toBe(0);
  });

  test("each body owns a buffer of exactly its size: no chunk it came in is kept alive by it", () => {
    const big = Uint8Array.from({ length: 70_000 }, (_, i) => i % 7);
    const stream = encodeMessage([Uint8Array.of(1, 2, 3), big, new Uint8Array(0)]);
    for (const cut of [stream.length, 50_000, 4096, 3]) {
      const reader = new FrameReader(1 << 20);
      const frames = [];
      for (let at = 0; at < stream.length; at += cut) frames.push(...reader.push(stream.slice(at, at + cut)));
      expect(frames.map((f) => f.body.buffer.byteLength)).toEqual([3, 70_000, 0]);
      expect(Buffer.compare(frames[1]!.body, big)).toBe(0);
    }
  });
});

describe("commands", () => {
  test("READY carries Socket-Type as metadata: name length, name, 4-byte value length, value", () => {
    const frame = readyCommand("PUB");
    expect(Array.from(frame)).toEqual([0x04, 25, 5, ...ascii("READY"), 11, ...ascii("Socket-Type"), 0, 0, 0, 3, ...ascii("PUB")]);
    const { name, data } = parseCommand(frame.subarray(2));
    expect(name).toBe("READY");
    const metadata = parseMetadata(data);
    expect(new TextDecoder().decode(metadata.get("socket-type"))).toBe("PUB");
    const two = parseMetadata(encodeMetadata({ "Socket-Type": Uint8Array.of(1), Identity: Uint8Array.of(2, 3) }));
    expect([...two.keys()]).toEqual(["socket-type", "identity"]);
    expect(() => parseMetadata(Uint8Array.of(4, 0x41))).toThrow(ZmtpError);
    expect(() => parseMetadata(Uint8Array.of(1, 0x41, 0, 0, 0, 5, 1))).toThrow("truncated value");
  });

  test("PONG echoes a PING's context (what follows its TTL)", () => {
    expect(Array.from(pongCommand(Uint8Array.of(0, 100, 7, 8)))).toEqual([0x04, 7, 4, ...ascii("PONG"), 7, 8]);
    expect(() => parseCommand(Uint8Array.of(9, 0x41))).toThrow(ZmtpError);
  });
});
