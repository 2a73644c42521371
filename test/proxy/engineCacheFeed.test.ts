/**
 * EngineCacheFeed's choice of what to mirror (src/proxy/engineCacheFeed.ts): offload tiers are
 * counted, not mirrored; of a hybrid model's KV cache groups, only one full-attention group is
 * followed, so a sliding-window group freeing a chain's first blocks does not empty the mirror.
 */
import { describe, expect, test } from "bun:test";
import type { BlockStored, KvEvent } from "../../src/kv/kvEventDecoding.ts";
import { mirrorBlockKeys } from "../../src/proxy/engineCacheMirror.ts";
import type { KvEventBatchIn } from "../../src/proxy/kvEventSubscriber.ts";
import { UpstreamCacheSync } from "../../src/proxy/upstreamCacheSync.ts";

const BLOCK = 2;
const tokens = [1, 2, 3, 4, 5, 6, 7, 8];
const keys = mirrorBlockKeys(tokens, BLOCK);
const hashes = ["h0", "h1", "h2", "h3"];
let seq = 0;

const batch = (...events: KvEvent[]): KvEventBatchIn => ({ ts: Date.now() / 1000, events, dataParallelRank: 0, layout: "map", unknownTypes: [], seq: BigInt(seq++), replayed: false });
const stored = (groupIdx: number | null, specKind?: string, medium = "GPU"): BlockStored => ({ type: "BlockStored", hashes, parent: null, tokenIds: tokens, blockSize: BLOCK, medium, loraId: null, loraName: null, groupIdx, ...(specKind === undefined ? {} : { specKind }) });
const removed = (groupIdx: number | null, ...removedHashes: string[]): KvEvent => ({ type: "BlockRemoved", hashes: removedHashes, medium: "GPU", groupIdx });

describe("EngineCacheFeed", () => {
  test("a hybrid model: the sliding-window group frees the chain's first blocks, the full-attention group keeps them; the mirror follows the latter", () => {
    const sync = new UpstreamCacheSync(() => {});
    // The same engine hashes in both groups, as vLLM names a block by its tokens whatever its group.
    sync.batch(batch(stored(0, "sliding_window"), stored(1, "full_attention")));
    expect(sync.cachedBlocks(keys)).toBe(4);
    sync.batch(batch(removed(0, "h0", "h1")));
    expect(sync.cachedBlocks(keys)).toBe(4);
    sync.batch(batch(removed(1, "h3")));
    expect(sync.cachedBlocks(keys)).toBe(3);
    // The group-0 store came first and was followed until group 1 showed its kind; the removal was not.
    expect(sync.stats).toMatchObject({ blocks: 3, otherGroupEvents: 1 });
  });

  test("the first group seen is followed until a full-attention group shows up; switching drops the mirror", () => {
    const sync = new UpstreamCacheSync(() => {});
    sync.batch(batch(stored(3, "sliding_window")));
    expect(sync.cachedBlocks(keys)).toBe(4);
    sync.batch(batch(stored(5, "mamba")));
    expect(sync.stats.otherGroupEvents).toBe(1);
    sync.batch(batch(removed(3, "h0"), stored(2, "full_attention", "GPU")));
    expect(sync.cachedBlocks(keys)).toBe(4);
    sync.batch(batch(removed(3, "h1", "h2", "h3")));
    expect(sync.cachedBlocks(keys)).toBe(4);
    sync.batch(batch(removed(2, "h2", "h3")));
    expect(sync.cachedBlocks(keys)).toBe(2);
  });

  test("a model with one group of any kind (a sliding-window-only model) is still followed", () => {
    const sync = new UpstreamCacheSync(() => {});
    sync.batch(batch(stored(0, "sliding_window")));
    sync.batch(batch(removed(0, "h3")));
    expect(sync.cachedBlocks(keys)).toBe(3);
    expect(sync.stats.otherGroupEvents).toBe(0);
  });

  test("events without a group (SGLang, older vLLM, ctxr) are followed; offload tiers are counted, not mirrored", () => {
    const sync = new UpstreamCacheSync(() => {});
    sync.batch(batch(stored(null, undefined, "CPU")));
    expect(sync.cachedBlocks(keys)).toBe(0);
    sync.batch(batch(stored(null)));
    expect(sync.cachedBlocks(keys)).toBe(4);
    expect(sync.stats).toMatchObject({ offloadEvents: 1, otherGroupEvents: 0 });
  });

  test("a resync forgets the followed group: the engine after it may have other groups", () => {
    const sync = new UpstreamCacheSync(() => {});
    sync.batch(batch(stored(1, "full_attention")));
    sync.resync("reconnect");
    expect(sync.cachedBlocks(keys)).toBe(0);
    sync.batch(batch(stored(0, "full_attention")));
    expect(sync.cachedBlocks(keys)).toBe(4);
  });
});
