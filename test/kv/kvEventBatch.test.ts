/** KV events in vLLM main's layout: exact field names and order, chains, hash encodings, the batch map. */
import { decode } from "@msgpack/msgpack";
import { describe, expect, test } from "bun:test";
import { allBlocksClearedEvent, blockRemovedEvent, blockStoredEvents, encodeKvEventBatch, externalBlockHash } from "../../src/kv/kvEventBatch.ts";
import { promptBlockHashes } from "../../src/kv/prefixBlockCache.ts";
import { decodeKvEventBatch } from "../../src/kv/kvEventDecoding.ts";

const hex = (n: number) => n.toString(16).padStart(32, "0");
const bytes = (hash: string) => Uint8Array.from(Buffer.from(hash, "hex"));
const decodeBatch = (payload: Uint8Array) => decode(payload, { useBigInt64: true }) as Record<string, unknown>;

describe("blockStoredEvents", () => {
  test("one event per chain, its parent the chain's first block's parent, tokens concatenated", () => {
    const [a, b, c, x, y] = promptBlockHashes("seed", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 2);
    const events = blockStoredEvents(
      [
        { hash: a!, parent: null, tokens: [1, 2] },
        { hash: b!, parent: a!, tokens: [3, 4] },
        // c was cached already (not stored), so x starts a chain whose parent is c.
        { hash: x!, parent: c!, tokens: [7, 8] },
        { hash: y!, parent: x!, tokens: [9, 10] },
        // Another prompt's first block.
        { hash: hex(7), parent: null, tokens: [11, 12] },
      ],
      "bytes",
    );
    expect(events).toEqual([
      { type: "BlockStored", block_hashes: [bytes(a!), bytes(b!)], parent_block_hash: null, token_ids: [1, 2, 3, 4], block_size: 2, lora_id: null, medium: "GPU", lora_name: null },
      { type: "BlockStored", block_hashes: [bytes(x!), bytes(y!)], parent_block_hash: bytes(c!), token_ids: [7, 8, 9, 10], block_size: 2, lora_id: null, medium: "GPU", lora_name: null },
      { type: "BlockStored", block_hashes: [bytes(hex(7))], parent_block_hash: null, token_ids: [11, 12], block_size: 2, lora_id: null, medium: "GPU", lora_name: null },
    ]);
    // vLLM's field order (msgspec writes a struct's fields in declaration order, the tag first).
    expect(Object.keys(events[0]!)).toEqual(["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"]);
    expect(blockStoredEvents([], "bytes")).toEqual([]);
  });

  test("hashes: 16 raw bytes, or the low 64 bits as an unsigned integer", () => {
    const hash = "0123456789abcdef" + "fedcba9876543210";
    expect(externalBlockHash(hash, "bytes")).toEqual(Uint8Array.from([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10]));
    expect(externalBlockHash(hash, "int")).toBe(0xfedcba9876543210n);
    for (const bad of ["", "xyz", hex(1).toUpperCase().replace("0", "A"), hex(1) + "0"]) expect(() => externalBlockHash(bad, "bytes")).toThrow(RangeError);
    const [stored] = blockStoredEvents([{ hash: hex(2), parent: hex(1), tokens: [5] }], "int");
    expect(stored!.block_hashes).toEqual([2n]);
    expect(stored!.parent_block_hash).toBe(1n);
  });
});

describe("encodeKvEventBatch", () => {
  test("a map {ts, events, data_parallel_rank} whose events decode to vLLM's maps", () => {
    const stored = blockStoredEvents([{ hash: hex(0xab), parent: null, tokens: [300, 70000] }], "bytes");
    const payload = encodeKvEventBatch(1712345678.25, [...stored, blockRemovedEvent([hex(0xab), hex(0xcd)], "bytes"), allBlocksClearedEvent()]);
    const batch = decodeBatch(payload);
    expect(Object.keys(batch)).toEqual(["ts", "events", "data_parallel_rank"]);
    expect(batch).toEqual({
      ts: 1712345678.25,
      events: [
        { type: "BlockStored", block_hashes: [bytes(hex(0xab))], parent_block_hash: null, token_ids: [300, 70000], block_size: 2, lora_id: null, medium: "GPU", lora_name: null },
        { type: "BlockRemoved", block_hashes: [bytes(hex(0xab)), bytes(hex(0xcd))], medium: "GPU" },
        { type: "AllBlocksCleared" },
      ],
      data_parallel_rank: 0,
    });
    // A fixmap of 3, "ts", then a float64.
    expect(Array.from(payload.subarray(0, 5))).toEqual([0x83, 0xa2, 0x74, 0x73, 0xcb]);
  });

  test("ts is a float64 even when whole; int hashes are msgpack uint64", () => {
    const payload = encodeKvEventBatch(5, [blockRemovedEvent([hex(0x1234)], "int")]);
    expect(payload[4]).toBe(0xcb);
    expect(decodeBatch(payload).ts).toBe(5);
    const hashAt = Buffer.from(payload).indexOf(Buffer.from([0xcf, 0, 0, 0, 0, 0, 0, 0x12, 0x34]));
    expect(hashAt).toBeGreaterThan(0);
    expect((decodeBatch(payload).events as { block_hashes: bigint[] }[])[0]!.block_hashes).toEqual([0x1234n]);
  });

  test("array and mixed layouts: an array batch [ts (float64), events, rank]; array events are tagged arrays in field order, trailing nulls left out", () => {
    const stored = blockStoredEvents([{ hash: hex(0xab), parent: null, tokens: [300, 70000] }], "int");
    const events = [...stored, blockRemovedEvent([hex(0xab)], "int"), allBlocksClearedEvent()];
    const array = encodeKvEventBatch(3, events, { layout: "array", dataParallelRank: 1 });
    expect(Array.from(array.subarray(0, 2))).toEqual([0x93, 0xcb]);
    expect(decode(array, { useBigInt64: true })).toEqual([3, [["BlockStored", [0xabn], null, [300, 70000], 2, null, "GPU"], ["BlockRemoved", [0xabn], "GPU"], ["AllBlocksCleared"]], 1]);
    const mixed = encodeKvEventBatch(3, events, { layout: "mixed" });
    expect(decode(mixed, { useBigInt64: true })).toEqual([3, events, 0]);
  });
});

describe("KV cache groups (a model with sliding-window layers)", () => {
  const sliding = { index: 1, kind: "sliding_window", slidingWindow: 512 } as const;
  const full = { index: 0, kind: "full_attention" } as const;

  test("each group's blocks carry group_idx and kv_cache_spec_kind (and the window), a chain per group, as vLLM's hybrid KV cache publishes them", () => {
    const [a, b, c] = promptBlockHashes("seed", [1, 2, 3, 4, 5, 6], 2);
    const events = blockStoredEvents(
      [
        { hash: a!, parent: null, tokens: [1, 2], group: full },
        { hash: b!, parent: a!, tokens: [3, 4], group: full },
        { hash: b!, parent: a!, tokens: [3, 4], group: sliding },
        { hash: c!, parent: b!, tokens: [5, 6], group: sliding },
      ],
      "int",
    );
    expect(events.map((event) => [event.group_idx, event.kv_cache_spec_kind, event.kv_cache_spec_sliding_window, event.block_hashes.length])).toEqual([
      [0, "full_attention", null, 2],
      [1, "sliding_window", 512, 2],
    ]);
    // Both layouts decode to the groups: the map omits the null defaults, the array keeps the positions.
    for (const layout of ["map", "array", "mixed"] as const) {
      const payload = encodeKvEventBatch(1.5, [...events, blockRemovedEvent([c!], "int", sliding)], { layout });
      const decoded = decodeKvEventBatch(payload);
      const kinds = decoded.events.map((event) => (typeof event === "string" ? event : [event.type, "groupIdx" in event ? event.groupIdx : undefined, "specKind" in event ? event.specKind : undefined]));
      expect(kinds).toEqual([
        ["BlockStored", 0, "full_attention"],
        ["BlockStored", 1, "sliding_window"],
        ["BlockRemoved", 1, undefined],
      ]);
    }
    const map = decodeBatch(encodeKvEventBatch(1.5, events, { layout: "map" }));
    const [fullEvent, slidingEvent] = map.events as Record<string, unknown>[];
    expect(Object.keys(fullEvent!)).toEqual(["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "group_idx", "kv_cache_spec_kind"]);
    expect(slidingEvent!.kv_cache_spec_sliding_window).toBe(512);
    const array = decode(encodeKvEventBatch(1.5, events, { layout: "array" }), { useBigInt64: true }) as unknown[][][];
    expect(array[1]![1]!.slice(8)).toEqual([null, 1, "sliding_window", 512]);
    // A model with one group publishes exactly as before: no group fields.
    expect(Object.keys(blockStoredEvents([{ hash: a!, parent: null, tokens: [1, 2] }], "int")[0]!)).not.toContain("group_idx");
    expect(blockRemovedEvent([a!], "int")).toEqual({ type: "BlockRemoved", block_hashes: [externalBlockHash(a!, "int")], medium: "GPU" });
  });
});
