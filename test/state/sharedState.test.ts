/**
 * Several `ctxr serve --state redis://...` processes over one real redis-server: what one
 * instance acknowledges, the others see; a new instance starts from the shared state; kill -9
 * loses nothing acknowledged; Redis going away degrades an instance without failing requests,
 * and it catches up when Redis returns; concurrent writers converge.
 */
import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.ts";
import { startFakeUpstream } from "../proxy/fakeUpstream.ts";
import { spawnServer, type SpawnedServer } from "../server/serverKit.ts";
import { stats, until } from "./sharedStateKit.ts";

setDefaultTimeout(90_000);

let redis: RedisServer;
const running: SpawnedServer[] = [];

beforeAll(async () => {
  redis = await startRedisServer({ appendOnly: true });
});
afterAll(async () => {
  await redis.stop();
});
afterEach(async () => {
  for (const server of running.splice(0)) {
    server.kill(9);
    await server.exited;
  }
  redis.cli("FLUSHALL");
});

async function instance(...extra: string[]): Promise<SpawnedServer> {
  const server = await spawnServer(["--state", redis.url, ...extra]);
  running.push(server);
  return server;
}

const block = (id: string) => ({ id, text: `document ${id} `.repeat(20) });

describe("ctxr serve --state redis://", () => {
  test("a context and a conversation written on one instance are used on another", async () => {
    const [a, b] = await Promise.all([instance(), instance()]);
    const first = await a.post("/v1/reorder", { contexts: [[block("x"), block("y"), block("z")]], conversation_id: "c1" });
    expect(first.status).toBe(200);
    await until("b to apply a's change", async () => (await stats(b)).contexts === 1);

    // b reorders a context sharing two of a's blocks: they come first, as the prefix a's request left.
    const second = await b.post("/v1/reorder", { contexts: [[block("w"), block("z"), block("x")]] });
    expect(first.body.results[0].blocks.map((b: { id: string }) => b.id)).toEqual(["x", "y", "z"]);
    expect(second.body.results[0].prefix_blocks).toBe(1);
    expect(second.body.results[0].blocks[0].id).toBe("x");

    // Dedup on b knows what the conversation was sent through a.
    const dedup = await b.post("/v1/dedup", { conversation_id: "c1", blocks: [block("x"), block("q")] });
    expect(dedup.status).toBe(200);
    expect(dedup.body.duplicates).toEqual(["x"]);

    const shared = (await stats(b)).shared_state;
    expect(shared.healthy).toBe(true);
    expect(shared.applied_changes).toBeGreaterThan(0);
    const health = await b.get("/healthz");
    expect(health.body).toEqual({ status: "ok" });
  });

  test("an instance killed with -9 loses nothing it acknowledged; a new instance starts from the shared state", async () => {
    const a = await instance();
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) {
      const answer = await a.post("/v1/reorder", { contexts: [[block(`d${i}`), block(`e${i % 5}`)]], conversation_id: `k${i % 4}` });
      expect(answer.status).toBe(200);
      ids.push(answer.body.results[0].request_id);
    }
    a.kill(9);
    await a.exited;
    running.splice(running.indexOf(a), 1);

    const c = await instance();
    const figures = await stats(c);
    expect(figures.contexts).toBe(40);
    expect(figures.conversations).toBe(4);
    const evicted = await c.post("/v1/evict", { request_ids: ids });
    expect(evicted.body.evicted).toBe(40);
  });

  test("snapshots: a new instance loads the snapshot and the log after it, and the log is trimmed", async () => {
    const a = await instance("--state-prefix", "snap", "--state-snapshot-every", "20");
    for (let i = 0; i < 150; i++) expect((await a.post("/v1/reorder", { contexts: [[block(`s${i}`)]] })).status).toBe(200);
    await until("a snapshot", async () => (await stats(a)).shared_state.snapshots_written >= 2);
    expect(JSON.parse(redis.cli("GET", "snap:snapshot")).id).toMatch(/^\d+-\d+$/);
    expect(Number(redis.cli("XLEN", "snap:log"))).toBeLessThan(150);
    const c = await instance("--state-prefix", "snap");
    expect((await stats(c)).contexts).toBe(150);
  });

  test("Redis unreachable: requests are served, /healthz says degraded, metrics count it; back: both catch up", async () => {
    const [a, b] = await Promise.all([instance(), instance()]);
    await a.post("/v1/reorder", { contexts: [[block("before")]] });
    await until("b to see the first context", async () => (await stats(b)).contexts === 1);

    await redis.kill();
    const during = await a.post("/v1/reorder", { contexts: [[block("during")]], conversation_id: "outage" });
    expect(during.status).toBe(200);
    const health = await until("a to report degraded", async () => {
      const answer = await a.get("/healthz");
      return answer.body.status === "degraded" ? answer : null;
    });
    expect(health.status).toBe(200);
    expect(health.body.error).toContain("shared state");
    const figures = (await stats(a)).shared_state;
    expect(figures.healthy).toBe(false);
    expect(figures.write_errors + figures.read_errors).toBeGreaterThan(0);
    const metrics = await a.get("/metrics");
    expect(metrics.text).toContain("ctxr_shared_state_healthy 0");

    await redis.start();
    await until("b to see the change a made during the outage", async () => (await stats(b)).contexts === 2);
    await until("a to be healthy again", async () => (await a.get("/healthz")).body.status === "ok");
    const dedup = await b.post("/v1/dedup", { conversation_id: "outage", blocks: [block("during")] });
    expect(dedup.body.duplicates).toEqual(["during"]);
  });

  test("concurrent writers on one conversation converge on the same labels", async () => {
    const [a, b] = await Promise.all([instance(), instance()]);
    const ids = Array.from({ length: 12 }, (_, i) => `b${i}`);
    const requests: Promise<unknown>[] = [];
    // Each request sends a different subset in a different order, so the two instances label
    // the same block differently ("[Doc N]" by position) and their writes cross in flight.
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
    for (let round = 0; round < 10; round++) {
      for (const server of [a, b]) {
        const blocks = ids.filter(() => random() < 0.6).sort(() => random() - 0.5).map(block);
        requests.push(server.post("/v1/dedup", { conversation_id: "shared", blocks }));
      }
    }
    for (const answer of (await Promise.all(requests)) as { status: number }[]) expect(answer.status).toBe(200);
    await until("both replicas to apply every change", async () => {
      const [sa, sb] = [(await stats(a)).shared_state, (await stats(b)).shared_state];
      return sa.unconfirmed_batches === 0 && sb.unconfirmed_batches === 0 && sa.last_entry === sb.last_entry;
    });
    // Every block was sent before: the probe records nothing and shows each replica's labels.
    const probe = { conversation_id: "shared", blocks: ids.map(block) };
    const [viewA, viewB] = [await a.post("/v1/dedup", probe), await b.post("/v1/dedup", probe)];
    expect(viewA.body.duplicates).toEqual(ids);
    expect(viewA.body.blocks).toEqual(viewB.body.blocks);
  });

  test("a reset on one instance racing writes on another: both end with the same index", async () => {
    const [a, b] = await Promise.all([instance(), instance()]);
    for (let i = 0; i < 10; i++) await a.post("/v1/reorder", { contexts: [[block(`old${i}`)]] });
    const writes = Array.from({ length: 30 }, (_, i) => b.post("/v1/reorder", { contexts: [[block(`new${i}`)]], conversation_id: "r" }));
    const reset = a.post("/v1/reset");
    for (const answer of await Promise.all([...writes, reset])) expect(answer.status).toBe(200);
    await until("both replicas to apply every change", async () => {
      const [sa, sb] = [(await stats(a)).shared_state, (await stats(b)).shared_state];
      return sa.unconfirmed_batches === 0 && sb.unconfirmed_batches === 0 && sa.last_entry === sb.last_entry;
    });
    const [fa, fb] = [await stats(a), await stats(b)];
    expect(fa.contexts).toBe(fb.contexts);
    expect(fa.conversations).toBe(fb.conversations);
    expect(fa.contexts).toBeLessThanOrEqual(30);
  });

  test("proxies: turn 2 on another instance forwards turn 1's history byte for byte and dedups its documents", async () => {
    const upstream = await startFakeUpstream();
    try {
      const [a, b] = await Promise.all([instance("--upstream", upstream.url), instance("--upstream", upstream.url)]);
      const docs = (...ids: string[]) => ids.map((id) => ({ id, text: `Document ${id}: ${"facts ".repeat(30)}` }));
      const turn1 = [{ role: "user", content: "First question?" }];
      expect((await a.post("/v1/chat/completions", { messages: turn1, documents: docs("p", "q"), ctxr: { conversation_id: "chat" } })).status).toBe(200);
      const forwarded1 = upstream.last().json.messages[0].content as string;
      // No waiting: b applies what the log holds before it reads (--state-reads log, the default).
      const turn2 = [...turn1, { role: "assistant", content: "An answer." }, { role: "user", content: "Second question?" }];
      expect((await b.post("/v1/chat/completions", { messages: turn2, documents: docs("q", "r"), ctxr: { conversation_id: "chat" } })).status).toBe(200);
      const messages = upstream.last().json.messages;
      expect(messages[0].content).toBe(forwarded1);
      expect(messages[2].content).toContain("Please refer to [Doc 2] in the previous conversation.");
    } finally {
      await upstream.stop();
    }
  });

  test("proxies: turns sent back to back, alternating instances, always find the previous turn", async () => {
    const upstream = await startFakeUpstream({ chunkDelayMs: 0 });
    try {
      const servers = await Promise.all([instance("--upstream", upstream.url), instance("--upstream", upstream.url)]);
      const doc = (c: number, d: number) => ({ id: `c${c}-d${d}`, text: `Document ${d} of conversation ${c}: ${"facts ".repeat(30)}` });
      const conversations = 12;
      const turns = 4;
      await Promise.all(
        Array.from({ length: conversations }, async (_, c) => {
          const messages: { role: string; content: string }[] = [];
          for (let t = 0; t < turns; t++) {
            messages.push({ role: "user", content: `Question ${t} of ${c}?` });
            // Turn t's documents t and t+1: document t was sent in turn t-1, on the other instance.
            const answer = await servers[(c + t) % 2]!.post("/v1/chat/completions", { messages, documents: [doc(c, t), doc(c, t + 1)], ctxr: { conversation_id: `b2b-${c}` } });
            expect(answer.status).toBe(200);
            messages.push({ role: "assistant", content: answer.body.choices[0].message.content });
          }
        }),
      );
      let deduplicated = 0;
      for (const server of servers) deduplicated += (await stats(server)).upstreams[0].documents_deduplicated;
      expect(deduplicated).toBe(conversations * (turns - 1));
    } finally {
      await upstream.stop();
    }
  });

  test("bad --state values are refused before anything starts", async () => {
    const { runCli } = await import("../helpers/cli.ts");
    const wrongScheme = runCli(["serve", "--state", "http://127.0.0.1:6379"]);
    expect(wrongScheme.code).not.toBe(0);
    expect(wrongScheme.stderr).toContain("--state");
    expect(wrongScheme.stderr).toContain("scheme http");
    const both = runCli(["serve", "--state", redis.url, "--data-dir", "/tmp/x"]);
    expect(both.code).not.toBe(0);
    expect(both.stderr).toContain("without --data-dir");
  });
});
