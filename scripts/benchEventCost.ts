/**
 * What following engines' KV events costs the proxy, in process (scripts/bench-routing.ts):
 *
 * - per request, the work ContextProxy adds on the request path: the forwarded prompt tokenized as
 *   the engine does (EnginePromptTokenizer.promptIds), its blocks named (mirrorBlockKeys), one
 *   mirror lookup per upstream for routing and one more for predicted_cached_tokens; for prompts
 *   seen before (warm: the tokenizer's span memo hits) or for the first time (cold);
 * - event throughput: batches as an engine publishes them (one per request admitted into a fake
 *   engine's LRU cache: its BlockStored and BlockRemoved), msgpack-encoded beforehand, then
 *   decoded and applied to an UpstreamCacheSync, in block events (stored + removed blocks) a second.
 */
import { blockRemovedEvent, blockStoredEvents, encodeKvEventBatch, type KvCacheEvent, type KvEventLayout } from "../src/kv/kvEventBatch.ts";
import { decodeKvEventBatch } from "../src/kv/kvEventDecoding.ts";
import { mirrorBlockKeys } from "../src/proxy/engineCacheMirror.ts";
import type { EnginePromptTokenizer } from "../src/proxy/enginePromptTokens.ts";
import { UpstreamCacheSync } from "../src/proxy/upstreamCacheSync.ts";
import { FakeBlockCache } from "../test/helpers/fakeEngine/fakeBlockCache.ts";
import { median } from "./benchKit.ts";

export interface RequestCost {
  requests: number;
  promptTokens: number;
  /** Medians per request, ms. */
  tokenizeMs: number;
  hashMs: number;
  lookupMs: number;
  totalMs: number;
}

export interface RequestCostOptions {
  /**
   * Measure each body the first time `tokenizer` sees it (its span memo misses; a warmed-up
   * tokenizer still knows the pieces), the mirrors filled by `fill` (another tokenizer) instead.
   * Default: the second time (the first round warms the JIT and the memos).
   */
  firstSightFill?: EnginePromptTokenizer;
}

/** `bodies`: forwarded chat bodies; `upstreams` mirrors, each filled with every prompt's blocks (lookups hit). */
export function requestCost(tokenizer: EnginePromptTokenizer, bodies: readonly Record<string, unknown>[], blockSize: number, upstreams = 4, options: RequestCostOptions = {}): RequestCost {
  const syncs = Array.from({ length: upstreams }, () => new UpstreamCacheSync(() => {}));
  const firstSight = options.firstSightFill !== undefined;
  let engineHash = 0;
  for (const [i, body] of bodies.entries()) {
    const ids = (options.firstSightFill ?? tokenizer).promptIds("chat", body)!;
    const blocks = Math.floor(ids.length / blockSize);
    const hashes = Array.from({ length: blocks }, () => `h${engineHash++}`);
    syncs[i % upstreams]!.batch({ ts: 0, seq: BigInt(i), replayed: true, dataParallelRank: null, layout: "map", unknownTypes: [], events: [{ type: "BlockStored", hashes, parent: null, tokenIds: ids.slice(0, blocks * blockSize), blockSize, medium: "GPU", loraId: null, loraName: null, groupIdx: null }] });
  }
  const times = { tokenize: [] as number[], hash: [] as number[], lookup: [] as number[], total: [] as number[] };
  let promptTokens = 0;
  for (let round = firstSight ? 1 : 0; round < 2; round++) {
    for (const body of bodies) {
      const t0 = performance.now();
      const ids = tokenizer.promptIds("chat", body)!;
      const t1 = performance.now();
      const keys = mirrorBlockKeys(ids, blockSize);
      const t2 = performance.now();
      let cached = 0;
      for (const sync of syncs) cached = Math.max(cached, sync.cachedBlocks(keys));
      cached += syncs[0]!.cachedBlocks(keys);
      const t3 = performance.now();
      // The first round warms the JIT and the tokenizer's caches.
      if (round === 0) continue;
      promptTokens += ids.length;
      times.tokenize.push(t1 - t0);
      times.hash.push(t2 - t1);
      times.lookup.push(t3 - t2);
      times.total.push(t3 - t0);
    }
  }
  return { requests: bodies.length, promptTokens, tokenizeMs: median(times.tokenize), hashMs: median(times.hash), lookupMs: median(times.lookup), totalMs: median(times.total) };
}

export interface EventThroughput {
  batches: number;
  blockEvents: number;
  layout: KvEventLayout;
  seconds: number;
  blockEventsPerSecond: number;
  /** Of which decoding alone. */
  decodeSeconds: number;
}

/** Batches from running `prompts` through an LRU cache of `capacityBlocks`, decoded and applied `rounds` times; the median round. */
export function eventThroughput(prompts: readonly number[][], blockSize: number, capacityBlocks: number, layout: KvEventLayout, rounds = 3): EventThroughput {
  const payloads: Uint8Array[] = [];
  let step: KvCacheEvent[] = [];
  let blockEvents = 0;
  const cache = new FakeBlockCache(blockSize, capacityBlocks, "throughput", {
    stored: (blocks) => {
      step.push(...blockStoredEvents(blocks, "bytes"));
      blockEvents += blocks.length;
    },
    removed: (hashes) => {
      if (hashes.length === 0) return;
      step.push(blockRemovedEvent(hashes, "bytes"));
      blockEvents += hashes.length;
    },
    cleared: () => {},
  });
  for (const prompt of prompts) {
    cache.release(cache.admit(prompt, prompt));
    if (step.length > 0) payloads.push(encodeKvEventBatch(Date.now() / 1000, step, { layout }));
    step = [];
  }
  const runs: { total: number; decode: number }[] = [];
  for (let round = 0; round < rounds; round++) {
    const sync = new UpstreamCacheSync(() => {});
    let decode = 0;
    const started = performance.now();
    for (const [seq, payload] of payloads.entries()) {
      const t = performance.now();
      const batch = decodeKvEventBatch(payload);
      decode += performance.now() - t;
      sync.batch(Object.assign(batch, { seq: BigInt(seq), replayed: false }));
    }
    runs.push({ total: (performance.now() - started) / 1000, decode: decode / 1000 });
  }
  const seconds = median(runs.map((r) => r.total));
  return { batches: payloads.length, blockEvents, layout, seconds, blockEventsPerSecond: blockEvents / seconds, decodeSeconds: median(runs.map((r) => r.decode)) };
}
