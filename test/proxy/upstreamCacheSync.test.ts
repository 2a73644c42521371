/**
 * UpstreamCacheSync's tracked contexts: a context leaves when the engine drops its prompt's last
 * block (engines drop a chain from its end), or clears.
 */
import { describe, expect, test } from "bun:test";
import type { KvEventBatchIn } from "../../src/proxy/kvEventSubscriber.ts";
import { mirrorBlockKeys } from "../../src/proxy/engineCacheMirror.ts";
import { UpstreamCacheSync } from "../../src/proxy/upstreamCacheSync.ts";

const BLOCK = 4;
const tokens = Array.from({ length: 5 * BLOCK }, (_, i) => 7 + i);
const keys = mirrorBlockKeys(tokens, BLOCK);
let seq = 0;
const batch = (events: KvEventBatchIn["events"]): KvEventBatchIn => ({ ts: Date.now() / 1000, events, dataParallelRank: 0, layout: "map", unknownTypes: [], seq: BigInt(seq++), replayed: false });
const removed = (...hashes: string[]) => batch([{ type: "BlockRemoved", hashes, medium: "GPU", groupIdx: null }]);

function synced(): { sync: UpstreamCacheSync; evicted: string[] } {
  const evicted: string[] = [];
  const sync = new UpstreamCacheSync((ids) => evicted.push(...ids));
  sync.batch(batch([{ type: "BlockStored", hashes: ["e0", "e1", "e2", "e3", "e4"], parent: null, tokenIds: tokens, blockSize: BLOCK, medium: "GPU", loraId: null, loraName: null, groupIdx: null }]));
  // "long" holds the 5 blocks, "short" their first 3.
  sync.track("long", keys);
  sync.track("short", keys.slice(0, 3));
  return { sync, evicted };
}

describe("UpstreamCacheSync contexts", () => {
  test("dropping a chain from its end evicts each context with its prompt's last block", () => {
    const { sync, evicted } = synced();
    sync.batch(removed("e4"));
    expect(evicted).toEqual(["long"]);
    sync.batch(removed("e3"));
    expect(evicted).toEqual(["long"]);
    sync.batch(removed("e2"));
    expect(evicted).toEqual(["long", "short"]);
    expect(sync.stats.contextsEvicted).toBe(2);
  });

  test("a context sent again is tracked by its new prompt; AllBlocksCleared evicts every context", () => {
    const { sync, evicted } = synced();
    sync.track("short", keys.slice(0, 2));
    sync.batch(removed("e4", "e3", "e2"));
    expect(evicted).toEqual(["long"]);
    sync.batch(batch([{ type: "AllBlocksCleared" }]));
    expect(evicted.sort()).toEqual(["long", "short"]);
  });
});
