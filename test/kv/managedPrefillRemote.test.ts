/**
 * The chunk cache's remote tier under managed prefill (real CPU runners, the tiny model, a real
 * redis-server): chunks one cache stored are written through and placed by another cache that
 * never computed them, counted as remote hits once, with full-prefill logits; a fetched variant
 * lives in the host tier (or on disk) afterwards, and is not kept where neither has room.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { ChunkCache } from "../../src/kv/chunkCache.ts";
import { RemoteKvTier, remoteNamespace } from "../../src/kv/remoteKvTier.ts";
import { modelIdentity } from "../../src/kv/modelIdentity.ts";
import { promptTokens } from "../../src/kv/segmentedPrompt.ts";
import type { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { parseRedisUrl } from "../../src/state/redisUrl.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { chunkedPrompt as prompt, fullPrefillLogits, maxAbsDiff, QUESTION, runManaged as managed, startManaged } from "../helpers/managedPrefillKit.ts";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.ts";

setDefaultTimeout(120_000);

let executable = "";
let model: { path: string; cleanup(): void };
let identity = "";
let redis: RedisServer;
const runners: RunnerProcess[] = [];
const tiers: RemoteKvTier[] = [];
let db = 0;

beforeAll(async () => {
  executable = buildRunner();
  model = tinyModelFolder({ layers: 4, seed: 7 });
  identity = await modelIdentity(model.path);
  redis = await startRedisServer();
});

afterAll(async () => {
  for (const tier of tiers) await tier.close();
  for (const runner of runners) await runner.shutdown();
  await redis?.stop();
  model?.cleanup();
});

/** A runner and chunk cache whose remote tier is database `database`. */
async function setup(database: number, cacheOptions: { deviceBlocks?: number; hostBytes?: number } = {}) {
  const probe = await startManaged(executable, model.path, runners, cacheOptions);
  const info = probe.runner.info;
  const remote = new RemoteKvTier({
    url: parseRedisUrl(`${redis.url}/${database}`, "--kv-remote"),
    capacityBytes: 1 << 30,
    modelIdentity: identity,
    namespace: remoteNamespace(identity, `kv=${info.kv_dtype}`),
    layers: info.layers,
    kvWidth: info.kv_heads * info.head_dim,
  });
  tiers.push(remote);
  expect(await remote.start()).toBe(true);
  // startManaged builds its own cache: this one, with the remote tier, replaces it.
  const cache = new ChunkCache(probe.runner, { ...cacheOptions, remote });
  cache.attachPool(probe.pool);
  return { runner: probe.runner, pool: probe.pool, cache, remote };
}

describe("managed prefill over a remote tier", () => {
  for (const deviceBlocks of [undefined, 0]) {
    test(`a chunk stored by one cache is a remote hit for another, exact (${deviceBlocks === 0 ? "stored straight to host" : "stored on the device"})`, async () => {
      const database = ++db;
      const a = await setup(database, deviceBlocks === undefined ? {} : { deviceBlocks });
      const b = await setup(database);
      const p = prompt([0, 1, 2]);
      const reference = await fullPrefillLogits(a.runner, a.pool, p);
      const first = await managed(a, p, { policy: "prophet", recomputeRatio: 0.2 });
      expect(first.usage.tier_hits).toEqual({ device: 0, host: 0, disk: 0, remote: 0 });
      await a.cache.remoteIdle();
      expect(a.remote.stats.writes).toBe(4);

      const hashes = p.segments.map((segment) => segment.hash);
      expect(await b.cache.fetchRemote(hashes)).toBe(4);
      expect(b.cache.stats.hostVariants).toBe(4);
      const second = await managed(b, p, { policy: "prophet", recomputeRatio: 0.2 });
      expect(second.usage.tier_hits).toEqual({ device: 0, host: 0, disk: 0, remote: 4 });
      expect(second.usage.prompt_tokens_computed).toBe(QUESTION.length);
      expect(maxAbsDiff(second.logits, reference)).toBeLessThanOrEqual(1e-4);
      expect(b.cache.stats.hits.remote).toBe(4);
      // A chunk it holds is not looked up again; the next hit is a local one.
      expect(await b.cache.fetchRemote(hashes)).toBe(0);
      const third = await managed(b, prompt([0, 1, 2, 3]), { policy: "prophet", recomputeRatio: 0.2 });
      expect(third.usage.tier_hits.remote).toBe(0);
      expect(third.usage.tier_hits.host + third.usage.tier_hits.device).toBe(4);
      // B wrote back only what it computed (chunk 3).
      await b.cache.remoteIdle();
      expect(b.remote.stats.writes).toBe(1);
    });
  }

  test("with no host or disk room a fetched variant is not kept: the chunk is computed", async () => {
    const database = ++db;
    const a = await setup(database);
    const b = await setup(database, { hostBytes: 0 });
    const p = prompt([4, 1]);
    await managed(a, p, { policy: "prophet", recomputeRatio: 0.2 });
    await a.cache.remoteIdle();
    expect(await b.cache.fetchRemote(p.segments.map((segment) => segment.hash))).toBe(0);
    const result = await managed(b, p, { policy: "prophet", recomputeRatio: 0.2 });
    expect(result.usage.prompt_tokens_computed).toBe(promptTokens(p).length);
    expect(b.remote.stats.found).toBe(3);
  });
});
