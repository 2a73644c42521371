/**
 * The remote chunk-cache tier against a real redis-server: key layout and namespaces, entries
 * as disk-tier files, the byte limit kept by Redis (least reused evicted, shared by two tiers),
 * damaged and foreign entries discarded, and Redis going away and coming back.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { RemoteKvKeys, RemoteKvTier, rankScore, remoteNamespace, usesOfScore, type RemoteKvTierOptions } from "../../src/kv/remoteKvTier.ts";
import { encodeKvCacheFile } from "../../src/kv/kvCacheFile.ts";
import { parseRedisUrl } from "../../src/state/redisUrl.ts";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.ts";
import { expectSameKv, randomKv } from "./kvFixtures.ts";

const MODEL = "0123456789abcdef".repeat(4);
const OTHER_MODEL = "fedcba9876543210".repeat(4);
const LAYERS = 2;
const WIDTH = 4;
const CHUNK = "c".repeat(32);

let redis: RedisServer;
const tiers: RemoteKvTier[] = [];
let nextDb = 1;

beforeAll(async () => {
  redis = await startRedisServer();
});

afterAll(async () => {
  for (const tier of tiers) await tier.close();
  await redis?.stop();
});

/** A started tier on a database of its own (unless `db` is given). */
async function open(options: Partial<RemoteKvTierOptions> & { db?: number } = {}): Promise<RemoteKvTier> {
  const db = options.db ?? nextDb++;
  const tier = new RemoteKvTier({
    url: parseRedisUrl(`${redis.url}/${db}`, "--kv-remote"),
    capacityBytes: 1 << 24,
    modelIdentity: MODEL,
    namespace: remoteNamespace(MODEL, "kv=f32"),
    layers: LAYERS,
    kvWidth: WIDTH,
    retryMs: 100,
    ...options,
  });
  tiers.push(tier);
  expect(await tier.start()).toBe(true);
  return tier;
}

const meta = (prefix: string[], exact: boolean, tokens: number, chunkHash = CHUNK) => ({ chunkHash, tokenCount: tokens, prefix, exact, cci: 0.5, interByPrefix: {}, tokenInter: new Array(tokens).fill(0.25), frequencyReuse: 0 });

async function put(tier: RemoteKvTier, prefix: string[], seed: number, tokens = 8, chunkHash = CHUNK): Promise<boolean> {
  return tier.write(chunkHash, prefix, true, randomKv(LAYERS, WIDTH, tokens, seed), meta(prefix, true, tokens, chunkHash));
}

describe("the pure parts", () => {
  test("namespaces differ by model and by KV settings; keys share one hash tag", () => {
    const a = remoteNamespace(MODEL, "kv=f32|device=cpu");
    expect(a).toMatch(/^[0-9a-f]{32}$/);
    expect(remoteNamespace(OTHER_MODEL, "kv=f32|device=cpu")).not.toBe(a);
    expect(remoteNamespace(MODEL, "kv=f16|device=cpu")).not.toBe(a);
    expect(remoteNamespace(MODEL, "kv=f32|device=cpu")).toBe(a);
    const keys = new RemoteKvKeys(a);
    const variant = keys.variant(CHUNK, ["h", "x"], true);
    expect(variant).toStartWith(`ctxr:kv:{${a}}:v:${CHUNK}:`);
    expect(keys.chunk(CHUNK)).toBe(`ctxr:kv:{${a}}:c:${CHUNK}`);
    // The variant key follows from the chunk, its prefix and exactness alone.
    expect(keys.variant(CHUNK, ["h", "x"], true)).toBe(variant);
    expect(keys.variant(CHUNK, ["h", "x"], false)).not.toBe(variant);
    expect(keys.variant(CHUNK, ["h"], true)).not.toBe(variant);
    expect(keys.variant(CHUNK, ["h,x"], true)).not.toBe(keys.variant(CHUNK, ["h", "x"], true));
    for (const key of [variant, keys.chunk(CHUNK), keys.rank, keys.sizes, keys.bytes]) expect(key).toContain(`{${a}}`);
  });

  test("rank scores order by uses, then by last use", () => {
    const now = Date.UTC(2030, 0, 1);
    expect(rankScore(0, now)).toBeLessThan(rankScore(0, now + 2000));
    expect(rankScore(0, now + 1e9)).toBeLessThan(rankScore(1, now));
    expect(usesOfScore(rankScore(7, now))).toBe(7);
    expect(rankScore(3, now) - 3).toBeLessThan(1);
  });
});

describe("against redis-server", () => {
  test("a written variant is found by another tier from the chunk hash alone, bytes as a disk-tier file", async () => {
    const writer = await open();
    const db = nextDb - 1;
    const reader = await open({ db });
    const data = randomKv(LAYERS, WIDTH, 8, 3);
    expect(await writer.write(CHUNK, ["h"], true, data, meta(["h"], true, 8))).toBe(true);
    const found = await reader.lookup(CHUNK);
    expect(found).toHaveLength(1);
    expectSameKv(found[0]!.data, data);
    expect(found[0]!.meta.prefix).toEqual(["h"]);
    const key = writer.keys.variant(CHUNK, ["h"], true);
    expect(found[0]!.key).toBe(key);
    // The value is exactly what the disk tier would write under that key.
    const file = encodeKvCacheFile(data, { modelIdentity: MODEL, layers: LAYERS, kvWidth: WIDTH, meta: meta(["h"], true, 8), key, pageSize: 16 });
    expect(redis.cli("-n", String(db), "STRLEN", key).trim()).toBe(String(file.length));
    expect(Number(redis.cli("-n", String(db), "GET", writer.keys.bytes).trim())).toBe(file.length);
    // Written once: a second write of the same variant is skipped.
    expect(await writer.write(CHUNK, ["h"], true, data, meta(["h"], true, 8))).toBe(false);
    expect(writer.stats).toMatchObject({ writes: 1, writesSkipped: 1, failures: 0, up: true });
    expect(await reader.lookup("d".repeat(32))).toEqual([]);
  });

  test("another model's tier, on the same database, sees nothing of this one", async () => {
    const mine = await open();
    const db = nextDb - 1;
    const other = await open({ db, modelIdentity: OTHER_MODEL, namespace: remoteNamespace(OTHER_MODEL, "kv=f32") });
    expect(await put(mine, ["h"], 1)).toBe(true);
    expect(await other.lookup(CHUNK)).toEqual([]);
    expect(await mine.lookup(CHUNK)).toHaveLength(1);
  });

  test("the byte limit is kept by Redis for every tier sharing it: the least reused go first", async () => {
    const probe = await open();
    const db = nextDb - 1;
    expect(await put(probe, ["size"], 9, 8, "e".repeat(32))).toBe(true);
    const size = Number(redis.cli("-n", String(db), "GET", probe.keys.bytes).trim());
    redis.cli("-n", String(db), "FLUSHDB");
    // Room for three variants of this size.
    const a = await open({ db, capacityBytes: 3 * size + 10 });
    const b = await open({ db, capacityBytes: 3 * size + 10 });
    expect(await put(a, ["p1"], 1)).toBe(true);
    expect(await put(b, ["p2"], 2)).toBe(true);
    expect(await put(a, ["p3"], 3)).toBe(true);
    // p1 and p3 are used (p1 twice); p2 is the least reused.
    a.touch(a.keys.variant(CHUNK, ["p1"], true));
    a.touch(a.keys.variant(CHUNK, ["p1"], true));
    b.touch(b.keys.variant(CHUNK, ["p3"], true));
    await a.idle();
    await b.idle();
    expect(await put(b, ["p4"], 4)).toBe(true);
    expect(b.stats.evicted).toBe(1);
    const left = (await a.lookup(CHUNK)).map((entry) => (entry.meta.prefix as string[])[0]).sort();
    expect(left).toEqual(["p1", "p3", "p4"]);
    expect(Number(redis.cli("-n", String(db), "GET", a.keys.bytes).trim())).toBe(3 * size);
    expect(redis.cli("-n", String(db), "ZCARD", a.keys.rank).trim()).toBe("3");
    expect(redis.cli("-n", String(db), "SCARD", a.keys.chunk(CHUNK)).trim()).toBe("3");
    // Now p4 (never used) is the lowest: the next write evicts it, never itself.
    expect(await put(a, ["p5"], 5)).toBe(true);
    expect((await a.lookup(CHUNK)).map((entry) => (entry.meta.prefix as string[])[0]).sort()).toEqual(["p1", "p3", "p5"]);
    // A variant larger than the limit is not written at all.
    const tiny = await open({ db, capacityBytes: size - 1 });
    expect(await put(tiny, ["big"], 6)).toBe(false);
    expect(tiny.stats.writesSkipped).toBe(1);
  });

  test("a damaged entry and a foreign one are discarded, counted, and never returned", async () => {
    const tier = await open();
    const db = nextDb - 1;
    expect(await put(tier, ["good"], 1)).toBe(true);
    expect(await put(tier, ["bad"], 2)).toBe(true);
    const bad = tier.keys.variant(CHUNK, ["bad"], true);
    // Flip a byte in the payload.
    const at = Number(redis.cli("-n", String(db), "STRLEN", bad).trim()) - 20;
    redis.cli("-n", String(db), "SETRANGE", bad, String(at), "\u0001");
    // Another model's file under this model's key.
    const foreign = tier.keys.variant(CHUNK, ["foreign"], true);
    const file = encodeKvCacheFile(randomKv(LAYERS, WIDTH, 8, 4), { modelIdentity: OTHER_MODEL, layers: LAYERS, kvWidth: WIDTH, meta: meta(["foreign"], true, 8), key: foreign });
    const writer = new Bun.RedisClient(`${redis.url}/${db}`);
    await writer.send("SET", [foreign, file as unknown as string]);
    await writer.send("SADD", [tier.keys.chunk(CHUNK), foreign]);
    writer.close();

    const found = await tier.lookup(CHUNK);
    expect(found.map((entry) => entry.meta.prefix)).toEqual([["good"]]);
    expect(tier.stats.discarded).toBe(2);
    await tier.idle();
    expect(redis.cli("-n", String(db), "EXISTS", bad).trim()).toBe("0");
    expect(redis.cli("-n", String(db), "EXISTS", foreign).trim()).toBe("0");
    expect(redis.cli("-n", String(db), "SMEMBERS", tier.keys.chunk(CHUNK)).trim()).toBe(tier.keys.variant(CHUNK, ["good"], true));
    // The accounting lost the damaged entry's bytes (the foreign one was never counted).
    expect(Number(redis.cli("-n", String(db), "GET", tier.keys.bytes).trim())).toBe(Number(redis.cli("-n", String(db), "STRLEN", tier.keys.variant(CHUNK, ["good"], true)).trim()));
  });

  /** An attacker with write access to Redis: a well-formed file with a valid checksum, other K/V, under an existing variant's key. */
  async function forge(tier: RemoteKvTier, db: number, prefix: string[], seed: number): Promise<void> {
    const key = tier.keys.variant(CHUNK, prefix, true);
    const file = encodeKvCacheFile(randomKv(LAYERS, WIDTH, 8, seed), { modelIdentity: MODEL, layers: LAYERS, kvWidth: WIDTH, meta: meta(prefix, true, 8), key });
    const writer = new Bun.RedisClient(`${redis.url}/${db}`);
    await writer.send("SET", [key, file as unknown as string]);
    writer.close();
  }

  test("without a secret, a forged entry with a matching checksum is used (what write access to Redis means)", async () => {
    const tier = await open();
    const db = nextDb - 1;
    expect(await put(tier, ["p"], 1)).toBe(true);
    await forge(tier, db, ["p"], 99);
    const [found] = await tier.lookup(CHUNK);
    expectSameKv(found!.data, randomKv(LAYERS, WIDTH, 8, 99));
    expect(tier.stats.authenticated).toBe(false);
  });

  test("with --kv-remote-secret, entries carry an HMAC: good ones are used, forged and other-secret ones discarded and counted", async () => {
    const secret = new TextEncoder().encode("a shared secret of 32 characters");
    const tier = await open({ secret });
    const db = nextDb - 1;
    const sibling = await open({ secret, db });
    expect(await put(tier, ["good"], 1)).toBe(true);
    expect(await put(tier, ["forged"], 2)).toBe(true);
    const [good] = await sibling.lookup(CHUNK).then((entries) => entries.filter((entry) => (entry.meta.prefix as string[])[0] === "good"));
    expectSameKv(good!.data, randomKv(LAYERS, WIDTH, 8, 1));
    expect(tier.stats.authenticated).toBe(true);

    await forge(tier, db, ["forged"], 99);
    const otherSecret = await open({ secret: new TextEncoder().encode("another secret, also long enough"), db });
    expect(await put(otherSecret, ["other"], 3)).toBe(true);

    const found = await sibling.lookup(CHUNK);
    expect(found.map((entry) => entry.meta.prefix)).toEqual([["good"]]);
    expect(sibling.stats.unauthenticated).toBe(2);
    expect(sibling.stats.discarded).toBe(2);
    await sibling.idle();
    expect(redis.cli("-n", String(db), "EXISTS", tier.keys.variant(CHUNK, ["forged"], true)).trim()).toBe("0");
    // A value moved under another key fails too: the MAC covers the key.
    const moved = tier.keys.variant(CHUNK, ["moved"], true);
    redis.cli("-n", String(db), "COPY", tier.keys.variant(CHUNK, ["good"], true), moved);
    redis.cli("-n", String(db), "SADD", tier.keys.chunk(CHUNK), moved);
    expect((await sibling.lookup(CHUNK)).map((entry) => entry.meta.prefix)).toEqual([["good"]]);
    expect(sibling.stats.unauthenticated).toBe(3);
  });

  test("Redis gone: lookups and writes are skipped at once and counted; Redis back: used again", async () => {
    const tier = await open({ db: 0 });
    expect(await put(tier, ["before"], 1)).toBe(true);
    await redis.kill();
    const started = Date.now();
    expect(await tier.lookup(CHUNK)).toEqual([]);
    expect(await put(tier, ["during"], 2)).toBe(false);
    expect(await tier.lookup(CHUNK)).toEqual([]);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(tier.stats.up).toBe(false);
    expect(tier.stats.failures).toBeGreaterThan(0);
    expect(tier.stats.skipped).toBeGreaterThan(0);
    await redis.start();
    // Reconnected in the background (every retryMs), before anything asks.
    const deadline = Date.now() + 2000;
    while (!tier.stats.up && Date.now() < deadline) await Bun.sleep(20);
    expect(tier.stats.up).toBe(true);
    expect(await tier.lookup(CHUNK)).toEqual([]); // Redis kept nothing over the kill
    expect(await put(tier, ["after"], 3)).toBe(true);
    expect((await tier.lookup(CHUNK)).map((entry) => entry.meta.prefix)).toEqual([["after"]]);
    expect(tier.stats.up).toBe(true);
  });

  test("a Redis that does not answer is given up on within the time limit", async () => {
    const tier = await open({ timeoutMs: 100 });
    expect(await put(tier, ["x"], 1)).toBe(true);
    const pid = Number(redis.cli("INFO", "server").match(/process_id:(\d+)/)![1]);
    process.kill(pid, "SIGSTOP");
    try {
      const started = Date.now();
      expect(await tier.lookup(CHUNK)).toEqual([]);
      expect(Date.now() - started).toBeLessThan(600);
      expect(tier.stats.failures).toBe(1);
      expect(tier.stats.up).toBe(false);
    } finally {
      process.kill(pid, "SIGCONT");
    }
    await Bun.sleep(150);
    expect(await tier.lookup(CHUNK)).toHaveLength(1);
  });
});
