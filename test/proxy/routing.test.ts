/** Several upstreams: cache-aware routing, failover, recovery and per-upstream cache clearing, end to end over HTTP. */
import { afterEach, describe, expect, test } from "bun:test";
import { startFakeUpstream, type FakeUpstream } from "./fakeUpstream.ts";
import { docs, startProxy, type ProxyServer } from "./proxyKit.ts";
import { sleep } from "../../src/runtime/sleep.ts";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function upstreams(n: number): Promise<FakeUpstream[]> {
  const started = await Promise.all(Array.from({ length: n }, () => startFakeUpstream()));
  cleanups.push(async () => void (await Promise.all(started.map((u) => u.stop()))));
  return started;
}

async function proxy(urls: string[], extra: { backoffMs?: number } = {}): Promise<ProxyServer> {
  const server = await startProxy({ upstreams: urls, engine: "vllm", backoffMs: extra.backoffMs ?? 50, maxBackoffMs: 200 });
  cleanups.push(() => server.close());
  return server;
}

/** A port nothing listens on (a fake upstream started and stopped). */
async function deadPort(): Promise<number> {
  const u = await startFakeUpstream();
  await u.stop();
  return u.port;
}

const ask = (server: ProxyServer, question: string, documents: { id: string; text: string }[], conversation?: string) =>
  server.post("/v1/chat/completions", { messages: [{ role: "user", content: question }], documents, ...(conversation ? { ctxr: { conversation_id: conversation } } : {}) });

describe("cache-aware routing across 2 upstreams", () => {
  test("requests sharing a prefix stick to the upstream that has it; others go to the least busy one", async () => {
    const [a, b] = await upstreams(2);
    const server = await proxy([a!.url, b!.url]);
    const shared = docs("d1", "d2", "d3", "d4", "d5", "d6");
    const other = docs("e1", "e2", "e3", "e4", "e5", "e6");
    expect((await ask(server, "Q1", shared)).status).toBe(200);
    expect([a!.requests.length, b!.requests.length]).toEqual([1, 0]);
    await ask(server, "Q2", other);
    expect([a!.requests.length, b!.requests.length]).toEqual([1, 1]);
    // The same documents again (another question, another conversation): to a, which holds them, three times over.
    for (const q of ["Q3", "Q4", "Q5"]) await ask(server, q, [...shared].reverse());
    expect([a!.requests.length, b!.requests.length]).toEqual([4, 1]);
    await ask(server, "Q6", other.slice(0, 5));
    expect([a!.requests.length, b!.requests.length]).toEqual([4, 2]);
    // New documents: the least busy upstream (b has had fewer requests).
    await ask(server, "Q7", docs("n1", "n2"));
    expect([a!.requests.length, b!.requests.length]).toEqual([4, 3]);
  });

  test("a conversation's later turns follow its history to the same upstream", async () => {
    const [a, b] = await upstreams(2);
    const server = await proxy([a!.url, b!.url]);
    const history: { role: string; content: string }[] = [];
    for (let turn = 1; turn <= 4; turn++) {
      history.push({ role: "user", content: `Turn ${turn} question about the topic?` });
      // Each turn some new documents and one repeated.
      const documents = docs(`t${turn}a`, `t${turn}b`, `t${turn}c`, turn > 1 ? `t${turn - 1}a` : "t0");
      await server.post("/v1/chat/completions", { messages: history, documents });
      history.push({ role: "assistant", content: `Answer ${turn}.` });
      // Another client's unrelated request in between goes to the other, less busy upstream.
      await ask(server, `noise ${turn}`, docs(`z${turn}x`, `z${turn}y`));
    }
    const turns = (u: FakeUpstream) => u.requests.filter((r) => r.text.includes("Turn 1 question")).length;
    expect([turns(a!), turns(b!)].sort()).toEqual([0, 4]);
    expect([a!.requests.length, b!.requests.length]).toEqual([4, 4]);
  });

  test("an unreachable upstream is skipped (the request still succeeds), reported in stats, and comes back after its backoff", async () => {
    const [a] = await upstreams(1);
    const port = await deadPort();
    const deadUrl = `http://127.0.0.1:${port}`;
    const server = await proxy([deadUrl, a!.url], { backoffMs: 80 });
    for (let i = 0; i < 4; i++) expect((await ask(server, `Q${i}`, docs(`x${i}`, `y${i}`))).status).toBe(200);
    expect(a!.requests.length).toBe(4);
    let stats = (await server.get("/v1/stats")).body.upstreams;
    expect(stats[0]).toMatchObject({ url: deadUrl, healthy: false, consecutive_failures: 1, errors: 1 });
    expect(stats[1]).toMatchObject({ url: a!.url, healthy: true, requests: 4 });
    expect(server.logs.join("")).toContain(`upstream ${deadUrl} unreachable`);

    const revived = await startFakeUpstream({ port });
    cleanups.push(() => revived.stop());
    await sleep(100);
    for (let i = 0; i < 4; i++) await ask(server, `R${i}`, docs(`r${i}`, `s${i}`));
    expect(revived.requests.length).toBeGreaterThan(0);
    stats = (await server.get("/v1/stats")).body.upstreams;
    expect(stats[0]).toMatchObject({ healthy: true, consecutive_failures: 0 });
    expect(server.logs.join("")).toContain(`upstream ${deadUrl} is back in rotation`);
  });

  test("the backoff doubles while an upstream stays down", async () => {
    const port = await deadPort();
    const [a] = await upstreams(1);
    const server = await proxy([`http://127.0.0.1:${port}`, a!.url], { backoffMs: 40 });
    const failures = async () => (await server.get("/v1/stats")).body.upstreams[0];
    await server.get("/v1/models");
    expect((await failures()).consecutive_failures).toBe(1);
    await sleep(50);
    // a may win on load; ask until the dead one is tried again.
    for (let i = 0; i < 4 && (await failures()).consecutive_failures < 2; i++) await server.get("/v1/models");
    const second = await failures();
    expect(second.consecutive_failures).toBe(2);
    expect(second.retry_in_ms).toBeGreaterThan(40);
    expect(second.retry_in_ms).toBeLessThanOrEqual(80);
  });

  test("all upstreams down: 502 JSON error, nothing kept in the index", async () => {
    const server = await proxy([`http://127.0.0.1:${await deadPort()}`, `http://127.0.0.1:${await deadPort()}`]);
    const answer = await ask(server, "Q", docs("a", "b"));
    expect(answer.status).toBe(502);
    expect(answer.body.error.message).toContain("no upstream available: 2 of 2 out of rotation");
    expect(answer.body.error.field).toBe("");
    const stats = (await server.get("/v1/stats")).body;
    expect(stats.contexts).toBe(0);
    expect(stats.upstreams.map((u: { healthy: boolean }) => u.healthy)).toEqual([false, false]);
    // Still down within the backoff: answered at once, not tried.
    expect((await server.get("/v1/models")).status).toBe(502);
  });

  test("AllBlocksCleared from one upstream removes only the contexts routed to it", async () => {
    const [a, b] = await upstreams(2);
    const server = await proxy([a!.url, b!.url]);
    await ask(server, "Q1", docs("a1", "a2"));
    await ask(server, "Q2", docs("b1", "b2"));
    await ask(server, "Q3", docs("a1", "a2", "a3"));
    expect([a!.requests.length, b!.requests.length]).toEqual([2, 1]);
    expect((await server.get("/v1/stats")).body.contexts).toBe(3);
    expect((await server.post("/v1/evict", { events: [{ type: "AllBlocksCleared" }], upstream: a!.url })).body).toEqual({ evicted: 2 });
    expect((await server.get("/v1/stats")).body.contexts).toBe(1);
    expect((await server.post("/v1/evict", { events: [{ type: "AllBlocksCleared" }], upstream: 1 })).body).toEqual({ evicted: 1 });
    expect((await server.post("/v1/evict", { events: [{ type: "AllBlocksCleared" }], upstream: 2 })).status).toBe(400);
  });
});
