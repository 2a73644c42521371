/**
 * KV event batches as engines send them, decoded: the three layouts (from our encoder and written
 * by hand as SGLang and vLLM releases write them), both hash kinds and every integer width,
 * trailing defaults left out, unknown fields and event types, and malformed payloads by kind.
 */
import { encode } from "@msgpack/msgpack";
import { describe, expect, test } from "bun:test";
import { allBlocksClearedEvent, blockRemovedEvent, blockStoredEvents, encodeKvEventBatch, KV_EVENT_LAYOUTS } from "../../src/kv/kvEventBatch.ts";
import { blockHashKey, decodeKvEventBatch, KvEventDecodeError } from "../../src/kv/kvEventDecoding.ts";
import { promptBlockHashes } from "../../src/kv/prefixBlockCache.ts";

const pack = (value: unknown) => encode(value, { useBigInt64: true });

function decodeError(payload: Uint8Array): KvEventDecodeError {
  try {
    decodeKvEventBatch(payload);
  } catch (error) {
    if (error instanceof KvEventDecodeError) return error;
    throw error;
  }
  throw new Error("decoded without error");
}

describe("blockHashKey", () => {
  test("bytes as x-prefixed hex, integers in decimal whatever their width or sign; never each other", () => {
    expect(blockHashKey(Uint8Array.of(0x00, 0xab, 0x12))).toBe("x00ab12");
    expect(blockHashKey(Uint8Array.of(0x12, 0x34).subarray(1))).toBe("x34");
    expect(blockHashKey(7)).toBe("7");
    expect(blockHashKey(7n)).toBe("7");
    expect(blockHashKey(-5)).toBe("-5");
    expect(blockHashKey(0xfedcba9876543210n)).toBe("18364758544493064720");
    expect(blockHashKey(Uint8Array.of(0x12))).not.toBe(blockHashKey(12));
    for (const bad of [1.5, "12", null, undefined, {}, [1]]) expect(blockHashKey(bad)).toBeNull();
  });
});

describe("decodeKvEventBatch", () => {
  const [a, b, c] = promptBlockHashes("seed", [1, 2, 3, 4, 5, 6], 2);
  const events = [
    ...blockStoredEvents(
      [
        { hash: a!, parent: null, tokens: [1, 2] },
        { hash: b!, parent: a!, tokens: [3, 4] },
      ],
      "bytes",
    ),
    blockRemovedEvent([b!], "bytes"),
    allBlocksClearedEvent(),
  ];

  test("every layout our encoder writes reads back to the same events, hashes as bytes and as 64-bit integers", () => {
    for (const hashes of ["bytes", "int"] as const) {
      const wire = [...blockStoredEvents([{ hash: a!, parent: null, tokens: [1, 2] }, { hash: b!, parent: a!, tokens: [3, 4] }, { hash: c!, parent: b!, tokens: [5, 6] }], hashes), blockRemovedEvent([b!], hashes), allBlocksClearedEvent()];
      const key = (hash: string) => (hashes === "bytes" ? `x${hash}` : BigInt(`0x${hash.slice(16)}`).toString());
      for (const layout of KV_EVENT_LAYOUTS) {
        const batch = decodeKvEventBatch(encodeKvEventBatch(1700000000.5, wire, { layout, dataParallelRank: 3 }));
        expect(batch).toEqual({
          ts: 1700000000.5,
          dataParallelRank: 3,
          layout,
          unknownTypes: [],
          events: [
            { type: "BlockStored", hashes: [key(a!), key(b!), key(c!)], parent: null, tokenIds: [1, 2, 3, 4, 5, 6], blockSize: 2, medium: "GPU", loraId: null, loraName: null, groupIdx: null },
            { type: "BlockRemoved", hashes: [key(b!)], medium: "GPU", groupIdx: null },
            { type: "AllBlocksCleared" },
          ],
        });
      }
    }
    // 64-bit integer hashes keep every bit (beyond 2^53).
    const int = decodeKvEventBatch(encodeKvEventBatch(1, [blockRemovedEvent(["0".repeat(16) + "ffffffffffffffff"], "int")], { layout: "array" }));
    expect((int.events[0] as { hashes: string[] }).hashes).toEqual(["18446744073709551615"]);
  });

  test("the array layout writes trailing nulls out; the map layout writes them", () => {
    const array = encodeKvEventBatch(1, events, { layout: "array" });
    const map = encodeKvEventBatch(1, events, { layout: "map" });
    expect(array.length).toBeLessThan(map.length);
    expect(Buffer.from(array).includes(Buffer.from("lora_name"))).toBe(false);
    expect(decodeKvEventBatch(array).events).toEqual(decodeKvEventBatch(map).events);
  });

  test("SGLang's arrays: [ts, events] without a rank, BlockStored ending at lora_id, BlockRemoved without medium, signed and small integer hashes", () => {
    const payload = pack([
      1712345678,
      [
        ["BlockStored", [-9007199254740993n, 5, 0x7fffffffffffffffn], null, [10, 11, 12, 13, 14, 15], 2, null],
        ["BlockStored", [-1], 5, [16, 17], 2],
        ["BlockRemoved", [5, -9007199254740993n]],
        ["AllBlocksCleared"],
      ],
    ]);
    expect(decodeKvEventBatch(payload)).toEqual({
      ts: 1712345678,
      dataParallelRank: null,
      layout: "array",
      unknownTypes: [],
      events: [
        { type: "BlockStored", hashes: ["-9007199254740993", "5", "9223372036854775807"], parent: null, tokenIds: [10, 11, 12, 13, 14, 15], blockSize: 2, medium: null, loraId: null, loraName: null, groupIdx: null },
        { type: "BlockStored", hashes: ["-1"], parent: "5", tokenIds: [16, 17], blockSize: 2, medium: null, loraId: null, loraName: null, groupIdx: null },
        { type: "BlockRemoved", hashes: ["5", "-9007199254740993"], medium: null, groupIdx: null },
        { type: "AllBlocksCleared" },
      ],
    });
  });

  test("vLLM main's maps with fields and event types it does not know: the fields are ignored, the types skipped and named", () => {
    const digest = new Uint8Array(32).fill(0xab);
    const payload = pack({
      ts: 2.25,
      events: [
        {
          type: "BlockStored",
          block_hashes: [digest],
          parent_block_hash: null,
          token_ids: [1, 2],
          block_size: 2,
          lora_id: 4,
          medium: "CPU",
          lora_name: "adapter",
          extra_keys: [["mm", "abc"]],
          group_idx: 1,
          kv_cache_spec_kind: "sliding_window",
          kv_cache_spec_sliding_window: 128,
          future_field: { nested: true },
        },
        { type: "BlockPinned", block_hashes: [digest] },
        { type: "BlockRemoved", block_hashes: [digest], medium: "CPU", group_idx: 1 },
      ],
      data_parallel_rank: 0,
      future_batch_field: 1,
    });
    const batch = decodeKvEventBatch(payload);
    expect(batch.layout).toBe("map");
    expect(batch.unknownTypes).toEqual(["BlockPinned"]);
    expect(batch.events).toEqual([
      { type: "BlockStored", hashes: [`x${"ab".repeat(32)}`], parent: null, tokenIds: [1, 2], blockSize: 2, medium: "CPU", loraId: 4, loraName: "adapter", groupIdx: 1, specKind: "sliding_window" },
      { type: "BlockRemoved", hashes: [`x${"ab".repeat(32)}`], medium: "CPU", groupIdx: 1 },
    ]);
  });

  test("released vLLM's array batch of map events, with tokens and a ts written as 64-bit integers", () => {
    const batch = decodeKvEventBatch(pack([7n, [{ type: "AllBlocksCleared" }, { type: "BlockStored", block_hashes: [1], parent_block_hash: 0, token_ids: [3n], block_size: 1n, lora_id: null, medium: "GPU" }], 0]));
    expect(batch.layout).toBe("mixed");
    expect(batch.ts).toBe(7);
    expect(batch.events[1]).toEqual({ type: "BlockStored", hashes: ["1"], parent: "0", tokenIds: [3], blockSize: 1, medium: "GPU", loraId: null, loraName: null, groupIdx: null });
  });

  test("malformed payloads fail with their kind and say what is wrong", () => {
    const cases: [Uint8Array, KvEventDecodeError["kind"], string][] = [
      [Uint8Array.of(0xc1), "msgpack", "not msgpack"],
      [Uint8Array.of(0x92, 0x01), "msgpack", "not msgpack"],
      [pack("hello"), "batch", "a batch is an array or a map"],
      [pack([null, []]), "batch", "ts must be a number"],
      [pack({ ts: 1, events: {} }), "batch", "events must be an array"],
      [pack([1, [], "rank"]), "batch", "data_parallel_rank must be an integer"],
      [pack([1, [7]]), "event", "events[0] is an array or a map"],
      [pack([1, [[3]]]), "event", "events[0] has no type tag"],
      [pack([1, [["BlockStored", [1], null, [1]]]]), "event", "events[0] (BlockStored).block_size must be an integer, got nothing"],
      [pack([1, [["BlockStored", [1], null, [1], 0]]]), "event", "block_size must be positive"],
      [pack([1, [["BlockStored", [1.5], null, [1], 1]]]), "event", "block_hashes[0] must be bytes or an integer"],
      [pack([1, [["BlockStored", [1], "p", [1], 1]]]), "event", "parent_block_hash must be bytes, an integer or null"],
      [pack([1, [["BlockStored", [1], null, [-1], 1]]]), "event", "token_ids[0] must be a non-negative integer"],
      [pack([1, [["BlockStored", [1], null, [1], 1, null, 5]]]), "event", "medium must be a string"],
      [pack({ ts: 1, events: [{ type: "BlockRemoved" }] }), "event", "events[0] (BlockRemoved).block_hashes must be an array, got nothing"],
      // Over the default limits: checked before decoding (values, objects, depth), or on the events array.
      [pack([1, Array.from({ length: 100_001 }, () => ["AllBlocksCleared"])]), "limits", "100001 events in one batch, over the limit of 100000"],
      [pack([1, [], null, Array.from({ length: 1_048_577 }, () => [])]), "limits", "more than 1048576 maps, arrays"],
      [pack([1, [], null, new Array(4_200_000).fill(0)]), "limits", "more than 4194304 values"],
      [pack([1, [], null, [[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]), "limits", "nested deeper than 16 levels"],
    ];
    for (const [payload, kind, message] of cases) {
      const error = decodeError(payload);
      expect(error.kind).toBe(kind);
      expect(error.message).toContain(message);
    }
  });
});
