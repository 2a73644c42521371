/**
 * The KV-events thread's messages (src/proxy/cacheKeyDelta.ts): random batches fed once straight
 * to an UpstreamCacheSync and once through EngineCacheFeed → CacheKeyDeltaSink → messages →
 * applyCacheKeyMessage must leave both syncs alike after every batch: the same keys held, the
 * same contexts evicted, the same counters.
 */
import { describe, expect, test } from "bun:test";
import type { KvEvent } from "../../src/kv/kvEventDecoding.ts";
import { applyCacheKeyMessage, CacheKeyDeltaSink, SlicedCacheKeyApplier, type CacheKeyMessage } from "../../src/proxy/cacheKeyDelta.ts";
import type { ContentKey } from "../../src/proxy/contentKey.ts";
import { EngineCacheFeed, type CacheKeySink } from "../../src/proxy/engineCacheFeed.ts";
import { mirrorBlockKeys } from "../../src/proxy/engineCacheMirror.ts";
import type { KvEventBatchIn } from "../../src/proxy/kvEventSubscriber.ts";
import { UpstreamCacheSync } from "../../src/proxy/upstreamCacheSync.ts";
import { seededRandom } from "../helpers/randomContexts.ts";
import { sleep } from "../../src/runtime/sleep.ts";

const BLOCK = 2;

/** Chains of blocks an engine might store: engine hashes for every block of every prompt, and the tokens. */
interface Prompt {
  tokens: number[];
  hashes: string[];
  keys: ContentKey[];
}

function prompts(random: () => number, count: number): Prompt[] {
  const out: Prompt[] = [];
  for (let p = 0; p < count; p++) {
    // Prompts share prefixes (from a few first tokens), so chains branch and repeat content.
    const tokens = Array.from({ length: BLOCK * (2 + Math.floor(random() * 4)) }, (_, i) => (i < BLOCK ? Math.floor(random() * 3) : Math.floor(random() * 5)));
    // Two engine hashes may name equal content (an engine can hold the same block twice).
    const hashes = Array.from({ length: tokens.length / BLOCK }, (_, b) => `p${p}b${b}`);
    out.push({ tokens, hashes, keys: mirrorBlockKeys(tokens, BLOCK) });
  }
  return out;
}

function randomBatch(random: () => number, all: Prompt[], seq: number): KvEventBatchIn {
  const events: KvEvent[] = [];
  const count = 1 + Math.floor(random() * 4);
  for (let e = 0; e < count; e++) {
    const roll = random();
    const prompt = all[Math.floor(random() * all.length)]!;
    const medium = random() < 0.1 ? "CPU" : "GPU";
    if (roll < 0.5) {
      // Stores a run of the chain from some block (its parent named by the engine's hash).
      const from = Math.floor(random() * prompt.hashes.length);
      const to = from + 1 + Math.floor(random() * (prompt.hashes.length - from));
      events.push({ type: "BlockStored", hashes: prompt.hashes.slice(from, to), parent: from === 0 ? null : prompt.hashes[from - 1]!, tokenIds: prompt.tokens.slice(from * BLOCK, to * BLOCK), blockSize: BLOCK, medium, loraId: null, loraName: null, groupIdx: null });
    } else if (roll < 0.95) {
      const from = Math.floor(random() * prompt.hashes.length);
      events.push({ type: "BlockRemoved", hashes: prompt.hashes.slice(from).reverse(), medium, groupIdx: null });
    } else {
      events.push({ type: "AllBlocksCleared" });
    }
  }
  return { ts: 1000 + seq, events, dataParallelRank: null, layout: "map", unknownTypes: [], seq: BigInt(seq), replayed: seq % 3 === 0 };
}

describe("CacheKeyDeltaSink and applyCacheKeyMessage", () => {
  for (const [seed, coalesce] of [1, 2, 3, 4, 5].flatMap((seed) => [[seed, false], [seed, true]] as const)) {
    test(`random batches (seed ${seed}${coalesce ? ", coalesced" : ""}): through the messages the sync ends as if fed in process, after every ${coalesce ? "flush" : "batch"}`, () => {
      const random = seededRandom(seed);
      const all = prompts(random, 12);
      const evicted = { direct: [] as string[], messages: [] as string[] };
      const now = () => 5_000_000;
      const direct = new UpstreamCacheSync((ids) => evicted.direct.push(...ids), now);
      const viaMessages = new UpstreamCacheSync((ids) => evicted.messages.push(...ids), now);
      const sent: CacheKeyMessage[] = [];
      // Coalesced: batches go out only when flushed (at random here; every 10 ms in the KV-events thread).
      const sink = new CacheKeyDeltaSink((message) => sent.push(message), coalesce ? 1e9 : 0);
      const feed = new EngineCacheFeed(sink);
      for (const sync of [direct, viaMessages]) sync.connected();
      feed.connected();
      let synced = true;
      for (let seq = 0; seq < 400; seq++) {
        // Contexts are tracked while both sides agree (else a drop still on its way would evict one on one side only).
        if (seq % 7 === 0 && synced) {
          const prompt = all[Math.floor(random() * all.length)]!;
          const id = `ctx${seq}`;
          direct.track(id, prompt.keys);
          viaMessages.track(id, prompt.keys);
        }
        const batch = randomBatch(random, all, seq);
        if (seq % 97 === 96) {
          direct.resync("gap");
          feed.resync();
        } else {
          direct.batch(batch);
          feed.batch(batch);
        }
        synced = !coalesce || random() < 0.3 || seq === 399;
        if (coalesce && synced) sink.flush();
        for (const message of sent.splice(0)) applyCacheKeyMessage(viaMessages, message);
        if (!synced) continue;
        for (const prompt of all) {
          for (const key of prompt.keys) expect(viaMessages.holds(key)).toBe(direct.holds(key));
          expect(viaMessages.cachedBlocks(prompt.keys)).toBe(direct.cachedBlocks(prompt.keys));
        }
        expect(viaMessages.stats).toEqual(direct.stats);
        expect(viaMessages.live).toBe(direct.live);
        expect(new Set(evicted.messages)).toEqual(new Set(evicted.direct));
      }
      // Not a vacuous run: blocks were held, contexts evicted, offload events counted.
      expect(evicted.direct.length).toBeGreaterThan(5);
      expect(direct.stats.offloadEvents).toBeGreaterThan(0);
    });
  }

  test("keys dropped during a batch are all named (their contexts leave); keys held after it only when the receiver lacks them", () => {
    const sent: CacheKeyMessage[] = [];
    const sink = new CacheKeyDeltaSink((message) => sent.push(message));
    const batch = { ts: 1, replayed: false, blockSize: 2, mirror: { blocks: 0, orphans: 0, malformed: 0, unknownRemovals: 0, bytes: 0, evictedForBytes: 0 }, offloadEvents: 0, otherGroupEvents: 0 };
    sink.keyHeld(1n);
    sink.keyHeld(2n);
    sink.batchApplied(batch);
    sink.keyHeld(3n);
    sink.keyDropped(3n);
    sink.keyDropped(1n);
    sink.keyDropped(2n);
    sink.keyHeld(2n);
    sink.batchApplied(batch);
    expect(sent.map((m) => (m.kind === "batch" ? [[...m.held], [...m.dropped]] : m.kind))).toEqual([
      [[1n, 2n], []],
      [[2n], [3n, 1n, 2n]],
    ]);
  });

  test("a clear voids what came before it in the batch", () => {
    const sent: CacheKeyMessage[] = [];
    const sink = new CacheKeyDeltaSink((message) => sent.push(message));
    sink.keyHeld(1n);
    sink.cleared();
    sink.keyHeld(2n);
    sink.batchApplied({ ts: 1, replayed: false, blockSize: 2, mirror: { blocks: 1, orphans: 0, malformed: 0, unknownRemovals: 0, bytes: 224, evictedForBytes: 0 }, offloadEvents: 0, otherGroupEvents: 0 });
    expect(sent.map((m) => (m.kind === "batch" ? [[...m.held], [...m.dropped]] : m.kind))).toEqual(["cleared", [[2n], []]]);
  });

  test("awaitApplied: one batch message in flight; batches meanwhile are gathered into the next, sent once the last is applied", async () => {
    const sent: CacheKeyMessage[] = [];
    const sink = new CacheKeyDeltaSink((message) => sent.push(message), 1, true);
    const batch = (ts: number) => ({ ts, replayed: false, blockSize: 2, mirror: { blocks: 0, orphans: 0, malformed: 0, unknownRemovals: 0, bytes: 0, evictedForBytes: 0 }, offloadEvents: 0, otherGroupEvents: 0 });
    const shown = () => sent.splice(0).map((m) => (m.kind === "batch" ? [m.batch.ts, [...m.held], [...m.dropped]] : m.kind));
    sink.keyHeld(1n);
    sink.batchApplied(batch(1));
    await sleep(20);
    expect(shown()).toEqual([[1, [1n], []]]);
    // Not applied yet: nothing more goes, whatever the timer says.
    for (let i = 2; i <= 50; i++) {
      sink.keyHeld(BigInt(i));
      if (i % 2 === 0) sink.keyDropped(BigInt(i));
      sink.batchApplied(batch(i));
    }
    await sleep(20);
    expect(shown()).toEqual([]);
    sink.applied();
    const [merged] = shown() as [number, bigint[], bigint[]][];
    expect(merged![0]).toBe(50);
    expect(merged![1]).toEqual(Array.from({ length: 24 }, (_, i) => BigInt(2 * i + 3)));
    expect(merged![2]).toEqual(Array.from({ length: 25 }, (_, i) => BigInt(2 * i + 2)));
    // A signal goes at once, after what was gathered.
    sink.keyHeld(99n);
    sink.batchApplied(batch(51));
    sink.disconnected();
    expect(shown()).toEqual([[51, [99n], []], "disconnected"]);
    // Past 262,144 keys gathered, the next goes without waiting: the gathered map stays bounded.
    sink.applied();
    sink.keyHeld(100n);
    sink.batchApplied(batch(52));
    await sleep(20);
    expect(shown()).toEqual([[52, [100n], []]]);
    for (let i = 0; i < 262_145; i++) sink.keyHeld(BigInt(1000 + i));
    sink.batchApplied(batch(53));
    const [big] = shown() as [number, bigint[], bigint[]][];
    expect(big![0]).toBe(53);
    expect(big![1].length).toBe(262_145);
  });

  test("SlicedCacheKeyApplier: a large message is applied a slice at a time, in order, signals after it; acknowledged once through", () => {
    const told: string[] = [];
    const sink: CacheKeySink = {
      keyHeld: (key) => told.push(`held ${key}`),
      keyDropped: (key) => told.push(`dropped ${key}`),
      cleared: () => told.push("cleared"),
      batchApplied: (batch) => told.push(`batch ${batch.ts}`),
      connected: () => told.push("connected"),
      disconnected: () => told.push("disconnected"),
      caughtUp: () => told.push("caughtUp"),
    };
    const pending: (() => void)[] = [];
    let acks = 0;
    const applier = new SlicedCacheKeyApplier(sink, () => acks++, 3, (run) => pending.push(run));
    const batch = { ts: 7, replayed: false, blockSize: 2, mirror: { blocks: 0, orphans: 0, malformed: 0, unknownRemovals: 0, bytes: 0, evictedForBytes: 0 }, offloadEvents: 0, otherGroupEvents: 0 };
    applier.push({ kind: "batch", held: BigUint64Array.of(10n, 11n, 12n, 13n), dropped: BigUint64Array.of(1n, 2n, 3n), batch });
    applier.push({ kind: "caughtUp" });
    expect(told.splice(0)).toEqual(["dropped 1", "dropped 2", "dropped 3"]);
    expect(acks).toBe(0);
    pending.shift()!();
    expect(told.splice(0)).toEqual(["held 10", "held 11", "held 12"]);
    pending.shift()!();
    expect(told.splice(0)).toEqual(["held 13", "batch 7", "caughtUp"]);
    expect(acks).toBe(1);
    expect(pending).toEqual([]);
    // A reset drops what is queued, a slice in progress included.
    applier.push({ kind: "batch", held: BigUint64Array.of(20n, 21n, 22n, 23n), dropped: new BigUint64Array(0), batch });
    applier.reset();
    pending.shift()!();
    expect(told.splice(0)).toEqual(["held 20", "held 21", "held 22"]);
    applier.push({ kind: "cleared" });
    expect(told.splice(0)).toEqual(["cleared"]);
    expect(acks).toBe(1);
  });
});
