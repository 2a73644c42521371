/**
 * The runner protocol codec (cuda/PROTOCOL.md): frames, every op body, and the
 * incremental frame reader over arbitrarily split chunks.
 */
import { describe, expect, test } from "bun:test";
import {
  BodyReader,
  FrameReader,
  Op,
  ProtocolError,
  decodeAllocResponse,
  decodeExportResponse,
  decodeForwardResponse,
  decodeInfo,
  encodeAlloc,
  encodeBlockPairs,
  encodeExport,
  encodeForward,
  encodeFree,
  encodeImport,
  encodeRequest,
  encodeResponse,
  encodeText,
  sequenceRange,
  slidingGroupOf,
  statsLength,
  type ForwardRequest,
} from "../../src/runner/runnerProtocol.ts";

const u32s = (bytes: Uint8Array) => Array.from(new Uint32Array(bytes.slice().buffer));
const f32Bytes = (values: number[]) => new Uint8Array(new Float32Array(values).buffer);
const concat = (...parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
};

const INFO = {
  layers: 2,
  hidden: 64,
  heads: 4,
  kv_heads: 2,
  head_dim: 16,
  vocab: 5,
  block_size: 16,
  num_blocks: 32,
  free_blocks: 32,
  device: "cpu",
  weight_dtype: "f32",
  kv_dtype: "f32",
  max_position_embeddings: 8192,
  architecture: "LlamaForCausalLM",
  build: "test",
};

describe("frames", () => {
  test("a request frame is u32 length, op, id, body (little-endian)", () => {
    const frame = encodeRequest(Op.ALLOC, 7, encodeAlloc(3));
    expect(u32s(frame)).toEqual([12, 2, 7, 3]);
    expect(u32s(encodeRequest(Op.SHUTDOWN, 0xfffffffe))).toEqual([8, 8, 0xfffffffe]);
  });

  test("the reader returns frames whole, whatever the chunking", () => {
    const frames = [encodeResponse(0, 0, encodeText('{"a":1}')), encodeResponse(1, 0), encodeResponse(2, 2, encodeText("out of KV blocks")), encodeResponse(3, 0, new Uint8Array(100_000).fill(7))];
    const stream = concat(...frames);
    for (const size of [1, 2, 3, 5, 11, 4096, stream.length]) {
      const reader = new FrameReader();
      const got = [];
      for (let offset = 0; offset < stream.length; offset += size) got.push(...reader.push(stream.subarray(offset, offset + size)));
      expect(got.map((f) => [f.id, f.status, f.body.length])).toEqual([
        [0, 0, 7],
        [1, 0, 0],
        [2, 2, 16],
        [3, 0, 100_000],
      ]);
      expect(new TextDecoder().decode(got[2]!.body)).toBe("out of KV blocks");
      expect(got[3]!.body.every((b) => b === 7)).toBe(true);
      expect(reader.pending).toBe(0);
    }
  });

  test("random splits of many frames", () => {
    let seed = 12345;
    const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    const bodies = Array.from({ length: 200 }, (_, i) => new Uint8Array(Math.floor(random() * 300)).fill(i & 0xff));
    const stream = concat(...bodies.map((body, i) => encodeResponse(i, i % 4, body)));
    const reader = new FrameReader();
    const got = [];
    let offset = 0;
    while (offset < stream.length) {
      const size = 1 + Math.floor(random() * 700);
      got.push(...reader.push(stream.subarray(offset, offset + size)));
      offset += size;
    }
    expect(got.length).toBe(200);
    got.forEach((frame, i) => {
      expect(frame.id).toBe(i);
      expect(frame.status).toBe(i % 4);
      expect(frame.body).toEqual(bodies[i]!);
    });
  });

  test("bodies are copies: later chunks do not change them", () => {
    const reader = new FrameReader();
    const chunk = encodeResponse(1, 0, new Uint8Array([1, 2, 3]));
    const [frame] = reader.push(chunk);
    chunk.fill(0);
    reader.push(encodeResponse(2, 0, new Uint8Array(70_000).fill(9)));
    expect(Array.from(frame!.body)).toEqual([1, 2, 3]);
  });

  test("a corrupt length is a protocol error", () => {
    expect(() => new FrameReader().push(new Uint8Array([3, 0, 0, 0, 0, 0, 0]))).toThrow(ProtocolError);
    expect(() => new FrameReader(1000).push(new Uint8Array([0xff, 0xff, 0, 0]))).toThrow(/over the limit/);
  });

  test("requests can be read back (the runner's side)", () => {
    const reader = new FrameReader();
    const [request] = reader.pushRequests(encodeRequest(Op.FREE, 9, encodeFree([4, 5])));
    expect(request!.op).toBe(Op.FREE);
    expect(request!.id).toBe(9);
    expect(u32s(request!.body)).toEqual([2, 4, 5]);
  });
});

describe("INFO", () => {
  test("decodes and checks the JSON", () => {
    expect(decodeInfo(encodeText(JSON.stringify(INFO)))).toEqual(INFO);
    expect(decodeInfo(encodeText(JSON.stringify({ ...INFO, extra: [1] }))).vocab).toBe(5);
    expect(() => decodeInfo(encodeText("not json"))).toThrow(/not JSON/);
    expect(() => decodeInfo(encodeText("[]"))).toThrow(/not a JSON object/);
    expect(() => decodeInfo(encodeText(JSON.stringify({ ...INFO, vocab: "5" })))).toThrow(/vocab/);
    expect(() => decodeInfo(encodeText(JSON.stringify({ ...INFO, device: 1 })))).toThrow(/device/);
  });

  test("kv_groups of a model with sliding-window layers: a full_attention then a sliding_window group, every layer once", () => {
    const groups = [
      { kind: "full_attention", layers: [1], num_blocks: 32, free_blocks: 30 },
      { kind: "sliding_window", sliding_window: 512, layers: [0], num_blocks: 8, free_blocks: 8 },
    ];
    const info = decodeInfo(encodeText(JSON.stringify({ ...INFO, layer_windows: [512, 0], kv_groups: groups })));
    expect(slidingGroupOf(info)).toEqual(groups[1]! as never);
    expect(slidingGroupOf(decodeInfo(encodeText(JSON.stringify(INFO))))).toBeNull();
    const bad = (kvGroups: unknown) => () => decodeInfo(encodeText(JSON.stringify({ ...INFO, kv_groups: kvGroups })));
    expect(bad([groups[0]])).toThrow(/kv_groups must be two groups/);
    expect(bad([groups[1], groups[0]])).toThrow(/full_attention group then a sliding_window group/);
    expect(bad([groups[0], { ...groups[1], layers: [1] }])).toThrow(/each of the 2 layers once/);
    expect(bad([groups[0], { ...groups[1], layers: [] }])).toThrow(/each of the 2 layers once/);
    expect(bad([groups[0], { ...groups[1], sliding_window: 0 }])).toThrow(/positive sliding_window/);
    expect(bad([groups[0], { ...groups[1], free_blocks: -1 }])).toThrow(/num_blocks, free_blocks and layers/);
  });
});

describe("block ops", () => {
  test("ALLOC, FREE, COPY/MOVE bodies", () => {
    expect(u32s(encodeAlloc(4))).toEqual([4]);
    expect(decodeAllocResponse(new Uint8Array(new Uint32Array([3, 10, 11, 12]).buffer), 3)).toEqual([10, 11, 12]);
    expect(() => decodeAllocResponse(new Uint8Array(new Uint32Array([3, 10, 11]).buffer))).toThrow(/too short/);
    expect(() => decodeAllocResponse(new Uint8Array(new Uint32Array([1, 10]).buffer), 2)).toThrow(/1 blocks for a request of 2/);
    expect(u32s(encodeFree([]))).toEqual([0]);
    expect(u32s(encodeFree([1, 2, 3]))).toEqual([3, 1, 2, 3]);
    expect(u32s(encodeBlockPairs([{ src: 1, dst: 2 }, { src: 5, dst: 0 }]))).toEqual([2, 1, 2, 5, 0]);
    // KV group 1 (the sliding-window layers') is a trailing field; group 0 is today's body.
    expect(u32s(encodeAlloc(4, 0))).toEqual([4]);
    expect(u32s(encodeAlloc(4, 1))).toEqual([4, 1]);
    expect(u32s(encodeFree([1, 2], 1))).toEqual([2, 1, 2, 1]);
    expect(u32s(encodeFree([1, 2], 0))).toEqual([2, 1, 2]);
  });

  test("values outside u32 are refused", () => {
    expect(() => encodeFree([-1])).toThrow(ProtocolError);
    expect(() => encodeAlloc(2 ** 32)).toThrow(ProtocolError);
    expect(() => encodeFree([1.5])).toThrow(ProtocolError);
  });
});

describe("FORWARD", () => {
  const request: ForwardRequest = {
    sequences: [
      { table: [3, 4], tokens: [10, 11, 12], indices: sequenceRange(0, 3), logitRows: [2] },
      { table: [7], tokens: [20], positions: [100], indices: [5], logitRows: [0] },
    ],
  };

  test("request body layout", () => {
    const body = encodeForward(request);
    // flags, n_seqs; seq 0: n_blocks, table, n_tokens, tokens, positions, indices, n_logits, rows; seq 1: ...
    expect(u32s(body)).toEqual([0, 2, 2, 3, 4, 3, 10, 11, 12, 0, 1, 2, 0, 1, 2, 1, 2, 1, 7, 1, 20, 100, 5, 1, 0]);
  });

  test("a sliding table follows its sequence's table (0xFFFFFFFF: a block that left the window)", () => {
    const body = encodeForward({ sequences: [{ table: [3, 4], slidingTable: [0xffffffff, 9], tokens: [10], indices: [20], logitRows: [0] }] });
    expect(u32s(body)).toEqual([0, 1, 2, 3, 4, 2, 0xffffffff, 9, 1, 10, 20, 20, 1, 0]);
  });

  test("negative positions are written as i32", () => {
    const body = encodeForward({ sequences: [{ table: [0], tokens: [1], positions: [-3], indices: [0], logitRows: [] }] });
    expect(new Int32Array(body.slice().buffer)[6]).toBe(-3);
  });

  test("with statistics: query rows and chunk bounds follow all sequences", () => {
    const stats: ForwardRequest = {
      stats: true,
      sequences: [
        { table: [0], tokens: [1, 2], indices: [0, 1], logitRows: [], queryRows: [1], chunkBounds: [0, 1, 2] },
        { table: [1], tokens: [3], indices: [4], logitRows: [0] },
      ],
    };
    const body = encodeForward(stats);
    expect(u32s(body)).toEqual([1, 2, 1, 0, 2, 1, 2, 0, 1, 0, 1, 0, 1, 1, 1, 3, 4, 4, 1, 0, 1, 1, 2, 0, 1, 2, 0, 0, 0]);
    expect(statsLength(stats.sequences[1]!)).toBe(5);
  });

  test("mismatched lengths are refused", () => {
    expect(() => encodeForward({ sequences: [{ table: [0], tokens: [1, 2], indices: [0], logitRows: [] }] })).toThrow(/2 tokens but 1 indices/);
    expect(() => encodeForward({ sequences: [{ table: [0], tokens: [1], positions: [0, 1], indices: [0], logitRows: [] }] })).toThrow(/positions/);
  });

  test("response: logits per sequence, then statistics per sequence and layer", () => {
    const logits = decodeForwardResponse(concat(f32Bytes([1, 2, 3, 4, 5]), f32Bytes([6, 7, 8, 9, 10])), request, INFO);
    expect(logits.logits.map((l) => Array.from(l))).toEqual([
      [1, 2, 3, 4, 5],
      [6, 7, 8, 9, 10],
    ]);
    expect(logits.stats).toBeUndefined();
    expect(() => decodeForwardResponse(f32Bytes([1, 2, 3, 4, 5]), request, INFO)).toThrow(/too short reading logits of sequence 1/);
    expect(() => decodeForwardResponse(f32Bytes(new Array(11).fill(0)), request, INFO)).toThrow(/trailing/);

    const stats: ForwardRequest = {
      stats: true,
      sequences: [{ table: [0], tokens: [1, 2], indices: [0, 1], logitRows: [1], queryRows: [0, 1], chunkBounds: [0, 1, 2] }],
    };
    // logits (1 × 5), then per layer: mass 2 × 2, chunks 2 × 2
    const body = concat(f32Bytes([0, 0, 0, 0, 1]), f32Bytes([1, 0, 0.5, 0.5]), f32Bytes([1, 0, 0.5, 0.5]), f32Bytes([1, 0, 0.25, 0.75]), f32Bytes([1, 0, 0.25, 0.75]));
    const decoded = decodeForwardResponse(body, stats, INFO);
    expect(decoded.stats!.length).toBe(1);
    expect(decoded.stats![0]!.length).toBe(2);
    expect(decoded.stats![0]![1]).toMatchObject({ queries: 2, len: 2, nChunks: 2 });
    expect(Array.from(decoded.stats![0]![1]!.mass)).toEqual([1, 0, 0.25, 0.75]);
  });
});

describe("EXPORT and IMPORT", () => {
  const small = { layers: 2, kv_heads: 1, head_dim: 2 };

  test("EXPORT request and response", () => {
    expect(u32s(encodeExport({ table: [5, 6], start: 3, count: 2 }))).toEqual([2, 5, 6, 3, 2]);
    const body = concat(new Uint8Array(new Int32Array([7, 8]).buffer), f32Bytes([1, 2, 3, 4]), f32Bytes([5, 6, 7, 8]), f32Bytes([9, 10, 11, 12]), f32Bytes([13, 14, 15, 16]));
    const data = decodeExportResponse(body, 2, small);
    expect(Array.from(data.positions)).toEqual([7, 8]);
    expect(Array.from(data.layers[1]!.v)).toEqual([13, 14, 15, 16]);
  });

  test("IMPORT round-trips what EXPORT gave", () => {
    const data = {
      positions: new Int32Array([7, -1]),
      layers: [
        { k: new Float32Array([1, 2, 3, 4]), v: new Float32Array([5, 6, 7, 8]) },
        { k: new Float32Array([9, 10, 11, 12]), v: new Float32Array([13, 14, 15, 16]) },
      ],
    };
    const body = encodeImport({ table: [1], start: 0, count: 2 }, data, small);
    const reader = new BodyReader(body, "IMPORT");
    expect(Array.from(reader.u32s(4, "header"))).toEqual([1, 1, 0, 2]);
    expect(decodeExportResponse(body.subarray(16), 2, small)).toEqual(data);
    expect(() => encodeImport({ table: [1], start: 0, count: 3 }, data, small)).toThrow(/2 positions for 3 entries/);
    expect(() => encodeImport({ table: [1], start: 0, count: 2 }, { ...data, layers: data.layers.slice(1) }, small)).toThrow(/1 layers/);
  });
});
