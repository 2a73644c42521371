/**
 * Event-driven routing's cost (upstreamPool.ts): blocks still to prefill there, weighted by
 * --kv-overlap-weight, plus the blocks of the prompts in flight there.
 */
import { describe, expect, test } from "bun:test";
import type { KvEvent } from "../../src/kv/kvEventDecoding.ts";
import { mirrorBlockKeys } from "../../src/proxy/engineCacheMirror.ts";
import { UpstreamCacheSync } from "../../src/proxy/upstreamCacheSync.ts";
import { DEFAULT_OVERLAP_WEIGHT, UpstreamPool } from "../../src/proxy/upstreamPool.ts";
import { parseUpstreamUrl } from "../../src/proxy/upstreamTarget.ts";

const BLOCK = 4;
const tokens = Array.from({ length: 10 * BLOCK }, (_, i) => 100 + i);
const keys = mirrorBlockKeys(tokens, BLOCK);

/** Two upstreams with live mirrors: the second holds the prompt's first 6 blocks and has 8 blocks in flight. */
function pool(overlapWeight?: number): UpstreamPool {
  const built = new UpstreamPool(["http://a", "http://b"].map(parseUpstreamUrl), overlapWeight === undefined ? {} : { overlapWeight });
  for (const upstream of built.upstreams) {
    upstream.sync = new UpstreamCacheSync(() => {});
    upstream.sync.caughtUp();
  }
  const holder = built.upstreams[1]!;
  const stored: KvEvent = { type: "BlockStored", hashes: ["h0", "h1", "h2", "h3", "h4", "h5"], parent: null, tokenIds: tokens.slice(0, 6 * BLOCK), blockSize: BLOCK, medium: "GPU", loraId: null, loraName: null, groupIdx: null };
  holder.sync!.batch({ ts: Date.now() / 1000, seq: 0n, replayed: false, dataParallelRank: null, layout: "map", unknownTypes: [], events: [stored] });
  holder.activeBlocks = 8;
  holder.inFlight = 1;
  return built;
}

describe("event-driven routing cost", () => {
  test("weight 1 (Dynamo's default): 4 blocks to prefill + 8 in flight on the holder lose to 10 to prefill on the idle one", () => {
    expect(pool(1).choose({ lookup: [], turn: null, blockKeys: keys })!.position).toBe(0);
  });

  test("the default weight (8): 8×4 + 8 on the holder win over 8×10 on the idle one", () => {
    expect(DEFAULT_OVERLAP_WEIGHT).toBe(8);
    expect(pool().choose({ lookup: [], turn: null, blockKeys: keys })!.position).toBe(1);
  });

  test("--kv-overlap-weight 4: 4×4 + 8 on the holder win over 4×10 on the idle one", () => {
    expect(pool(4).choose({ lookup: [], turn: null, blockKeys: keys })!.position).toBe(1);
  });

  test("weight 0: load alone", () => {
    expect(pool(0).choose({ lookup: [], turn: null, blockKeys: keys })!.position).toBe(0);
  });
});
