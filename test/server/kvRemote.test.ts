/**
 * The remote chunk-cache tier (--kv-remote) across `ctxr serve --model` processes (real servers
 * on ephemeral ports, the real CPU runner, the tiny model, a real redis-server): a chunk one
 * instance computed is reused by another that never saw it, with the same answer; the byte limit
 * evicts in Redis; a damaged entry is discarded and its chunk computed; with Redis killed the
 * requests are still served and the failures counted, and once it is back it is used again.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { chatOverDocuments as chat, DOCS } from "../helpers/kvGenerationKit.ts";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.ts";
import { spawnServer, type SpawnedServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

let model: { path: string; cleanup(): void };
let redis: RedisServer;
const spawned: SpawnedServer[] = [];
const folder = tempFolder("ctxr-kv-remote-");

const OTHER_DOCS = [
  { id: "e", text: "The ferry leaves the north quay at dawn and returns before the evening tide." },
  { id: "f", text: "Its captain keeps a logbook of every crossing since the harbour was rebuilt." },
  { id: "g", text: "Fog delays the ferry most often in November, rarely in summer." },
  { id: "h", text: "A bell on the quay is rung when the ferry is an hour late." },
];

/** Chunks are looked up remotely only when an instance has no variant of them at all. */
const THIRD_DOCS = [
  { id: "i", text: "Orchard trees on the south slope blossom a week before the others." },
  { id: "j", text: "Frost nets are spread over them on clear April nights." },
  { id: "k", text: "The cider press was moved into the barn after the storm of 1990." },
  { id: "l", text: "Pickers are paid by the crate, and the crates are counted at noon." },
];

beforeAll(async () => {
  buildRunner();
  model = tinyModelFolder({ layers: 3, seed: 11 }, "tiny-remote");
  redis = await startRedisServer();
}, 300_000);

afterAll(async () => {
  for (const server of spawned) {
    server.kill("SIGTERM");
    await server.exited;
  }
  await redis?.stop();
  model?.cleanup();
  folder.cleanup();
});

/** `ctxr serve --model` with its remote tier on database `db` of the test's redis-server. */
async function instance(db: number, extra: string[] = []): Promise<SpawnedServer> {
  const server = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "256", "--threads", "2", "--kv-remote", `${redis.url}/${db}`, ...extra], {}, 60_000);
  spawned.push(server);
  return server;
}

async function remoteStats(server: SpawnedServer): Promise<Record<string, number | boolean | string>> {
  const stats = await server.get("/v1/stats");
  expect(stats.status).toBe(200);
  return stats.body.kv_remote;
}

/** Waits until the instance's remote stats satisfy `done` (its writes go out in the background). */
async function until(server: SpawnedServer, done: (stats: Record<string, number | boolean | string>) => boolean): Promise<Record<string, number | boolean | string>> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const stats = await remoteStats(server);
    if (done(stats)) return stats;
    if (Date.now() > deadline) throw new Error(`remote stats never got there: ${JSON.stringify(stats)}`);
    await Bun.sleep(50);
  }
}

/** A variant's JSON header (kvCacheFile.ts: magic, u32 length, JSON). */
function headerOf(bytes: Uint8Array): { meta: { prefix: string[] } } {
  const length = new DataView(bytes.buffer, bytes.byteOffset).getUint32(8, true);
  return JSON.parse(new TextDecoder().decode(bytes.subarray(12, 12 + length)));
}

async function variantValues(db: number): Promise<{ key: string; bytes: Uint8Array }[]> {
  const keys = redis.cli("-n", String(db), "--scan", "--pattern", "ctxr:kv:*:v:*").split("\n").filter(Boolean);
  const client = new Bun.RedisClient(`${redis.url}/${db}`);
  try {
    return await Promise.all(keys.map(async (key) => ({ key, bytes: (await client.getBuffer(key))! })));
  } finally {
    client.close();
  }
}

describe("ctxr serve --kv-remote", () => {
  test("flags: listed in --help, the URL validated naming the flag, model-only, --kv-remote-bytes needs --kv-remote", () => {
    const help = runCli(["serve", "--help"]).stdout;
    expect(help).toContain("--kv-remote URL");
    expect(help).toContain("--kv-remote-bytes B");
    const modelArgs = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--kv-remote", "http://localhost:6379"], "--kv-remote: \"http://localhost:6379\" has scheme http; expected redis://HOST:PORT[/DB]"],
      [["--kv-remote", "redis://localhost:6379/x"], "--kv-remote: database \"x\""],
      [["--kv-remote", "nope"], "--kv-remote: \"nope\" is not a URL"],
      [["--kv-remote-bytes", "1GiB"], "--kv-remote-bytes needs --kv-remote"],
      [["--kv-remote", "redis://localhost:6379", "--kv-remote-bytes", "0"], "--kv-remote-bytes must be a byte size of at least 1"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...modelArgs, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    const withoutModel = runCli(["serve", "--in-memory", "--port", "0", "--kv-remote", "redis://localhost:6379"]);
    expect(withoutModel.code).toBe(2);
    expect(withoutModel.stderr).toContain("ctxr serve: --kv-remote needs --model");
  });

  test("a chunk instance A computed is reused by instance B, which never saw it: a remote hit, the same answer", async () => {
    const a = await instance(1);
    const b = await instance(1);
    expect(a.startLines.join("\n")).toContain(`remote ${redis.url}/1 (4 GiB)`);
    const first = await a.post("/v1/chat/completions", chat(DOCS));
    expect(first.status).toBe(200);
    expect(first.body.usage.ctxr.tier_hits).toEqual({ device: 0, host: 0, disk: 0, remote: 0 });
    // The head and four documents, written through after the answer.
    const written = await until(a, (s) => s.writes === 5);
    expect(written).toMatchObject({ up: true, failures: 0, discarded: 0 });
    expect((await variantValues(1)).length).toBe(5);

    const second = await b.post("/v1/chat/completions", chat(DOCS));
    expect(second.status).toBe(200);
    const usage = second.body.usage.ctxr;
    expect(usage.tier_hits).toEqual({ device: 0, host: 0, disk: 0, remote: 5 });
    expect(usage.prompt_tokens_computed).toBeLessThan(first.body.usage.ctxr.prompt_tokens_computed / 4);
    expect(second.body.choices[0].message.content).toBe(first.body.choices[0].message.content);
    const stats = await remoteStats(b);
    expect(stats).toMatchObject({ hits: 5, fetched: 5, found: 5, up: true, failures: 0 });
    // B had them all: it wrote nothing back.
    expect(stats.writes).toBe(0);
    const metrics = (await b.get("/metrics")).text;
    expect(metrics).toContain("ctxr_kv_remote_hits_total 5");
    expect(metrics).toContain("ctxr_kv_remote_up 1");
    // The uses are counted in Redis: each entry's rank went from 0 uses to 1.
    const scores = redis.cli("-n", "1", "--scan", "--pattern", "ctxr:kv:*:rank").trim();
    const ranked = redis.cli("-n", "1", "ZRANGE", scores, "0", "-1", "WITHSCORES").trim().split("\n");
    for (let i = 1; i < ranked.length; i += 2) expect(Math.floor(Number(ranked[i]))).toBe(1);

    // Reordered, on B again: its own copies now, no remote hit.
    const again = await b.post("/v1/chat/completions", chat([DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!]));
    expect(again.body.usage.ctxr.tier_hits.remote).toBe(0);
    expect(again.body.usage.ctxr.prompt_tokens_chunk_reused).toBeGreaterThan(0);
    expect((await remoteStats(b)).lookups).toBe(5);
  });

  test("--kv-remote-bytes: Redis keeps the model's entries within it, evicting the least reused", async () => {
    // The sizes of this request's five variants.
    const probe = await instance(2);
    await probe.post("/v1/chat/completions", chat(OTHER_DOCS));
    await until(probe, (s) => s.writes === 5);
    const sizes = (await variantValues(2)).map((v) => v.bytes.length).sort((x, y) => y - x);
    const limit = sizes[0]! + sizes[1]! + 1;
    const a = await instance(3, ["--kv-remote-bytes", String(limit)]);
    await a.post("/v1/chat/completions", chat(OTHER_DOCS));
    const stats = await until(a, (s) => (s.writes as number) + (s.writes_skipped as number) === 5);
    expect(stats.capacity_bytes).toBe(limit);
    const left = await variantValues(3);
    expect(left.length).toBeGreaterThanOrEqual(1);
    expect(left.length).toBeLessThanOrEqual(2);
    expect(stats.evicted).toBe(5 - left.length);
    const total = left.reduce((sum, v) => sum + v.bytes.length, 0);
    expect(total).toBeLessThanOrEqual(limit);
    const counter = redis.cli("-n", "3", "--scan", "--pattern", "ctxr:kv:*:bytes").trim();
    expect(Number(redis.cli("-n", "3", "GET", counter).trim())).toBe(total);
    expect(stats.bytes).toBe(total);
    // Another instance finds exactly what is left.
    const b = await instance(3, ["--kv-remote-bytes", String(limit)]);
    const answer = await b.post("/v1/chat/completions", chat(OTHER_DOCS));
    expect(answer.status).toBe(200);
    expect(answer.body.usage.ctxr.tier_hits.remote).toBe(left.length);
  });

  test("a damaged entry is discarded and counted, never used: its chunk is computed and the answer is unchanged", async () => {
    const a = await instance(4);
    const first = await a.post("/v1/chat/completions", chat(DOCS));
    await until(a, (s) => s.writes === 5);
    // Damage the last document's variant (prefix: the head and three documents).
    const last = (await variantValues(4)).find((v) => headerOf(v.bytes).meta.prefix.length === 4)!;
    redis.cli("-n", "4", "SETRANGE", last.key, String(last.bytes.length - 40), "\u0007");
    const b = await instance(4);
    const second = await b.post("/v1/chat/completions", chat(DOCS));
    expect(second.status).toBe(200);
    expect(second.body.usage.ctxr.tier_hits).toEqual({ device: 0, host: 0, disk: 0, remote: 4 });
    expect(second.body.choices[0].message.content).toBe(first.body.choices[0].message.content);
    // B computed the chunk again and wrote it back: five good entries once more.
    const stats = await until(b, (s) => s.writes === 1);
    expect(stats).toMatchObject({ discarded: 1, hits: 4, failures: 0 });
    expect((await b.get("/metrics")).text).toContain("ctxr_kv_remote_discarded_total 1");
    const values = await variantValues(4);
    expect(values.length).toBe(5);
    expect(headerOf(values.find((v) => v.key === last.key)!.bytes).meta.prefix).toEqual(headerOf(last.bytes).meta.prefix);
  });

  test("Redis killed: requests are still served at once and the failures counted; Redis back: used again", async () => {
    const a = await instance(0);
    const b = await instance(0);
    await redis.kill();
    const started = Date.now();
    const during = await a.post("/v1/chat/completions", chat(DOCS));
    expect(during.status).toBe(200);
    expect(during.body.usage.ctxr.tier_hits.remote).toBe(0);
    expect(Date.now() - started).toBeLessThan(10_000);
    const duringB = await b.post("/v1/chat/completions", chat(OTHER_DOCS));
    expect(duringB.status).toBe(200);
    const down = await until(a, (s) => s.up === false);
    expect(down.failures as number).toBeGreaterThan(0);
    expect((await a.get("/metrics")).text).toContain("ctxr_kv_remote_up 0");
    expect((await a.get("/metrics")).text).toMatch(/ctxr_kv_remote_failures_total [1-9]/);

    await redis.start();
    await Bun.sleep(1200); // past the retry delay
    // A new head (another system message) and new documents: five chunks neither instance has
    // (an instance holding any variant of a chunk uses its own and does not look it up).
    const fresh = chat(THIRD_DOCS, { messages: [{ role: "system", content: "Ferry desk: answer from these notes." }, { role: "user", content: "When does the ferry leave?" }] });
    const after = await a.post("/v1/chat/completions", fresh);
    expect(after.status).toBe(200);
    expect(after.body.usage.ctxr.prompt_tokens_computed).toBe(after.body.usage.prompt_tokens);
    await until(a, (s) => s.up === true && s.writes === 5);
    const hit = await b.post("/v1/chat/completions", fresh);
    expect(hit.body.usage.ctxr.tier_hits.remote).toBe(5);
    expect(hit.body.choices[0].message.content).toBe(after.body.choices[0].message.content);
    expect((await remoteStats(b)).up).toBe(true);
  });
});
