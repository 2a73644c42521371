/**
 * Routing and eviction on engines' KV events (issue 13, item 3): ctxr in front of two fake
 * upstreams whose cache mirrors are fed decoded event batches directly (the subscriber that reads
 * them off ZeroMQ is tested on its own). A request goes where its prompt's blocks really are, by
 * Dynamo's cost (blocks to prefill + blocks in flight); without live events, by the estimate; a
 * context leaves the live index when the engine drops one of its blocks.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import type { ContextProxy } from "../../src/proxy/contextProxy.ts";
import { EnginePromptTokenizer } from "../../src/proxy/enginePromptTokens.ts";
import type { KvEventBatchIn } from "../../src/proxy/kvEventSubscriber.ts";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { startFakeUpstream, type FakeUpstream } from "./fakeUpstream.ts";
import { docs, startProxy, type ProxyServer } from "./proxyKit.ts";
import { sleep } from "../../src/runtime/sleep.ts";

const BLOCK = 4;
let model: { path: string; cleanup(): void };
let tokenizer: EnginePromptTokenizer;
let upstreams: FakeUpstream[];
let ctxr: ProxyServer;
let proxy: ContextProxy;

beforeAll(async () => {
  model = tinyModelFolder({ layers: 1 }, "tiny-routing");
  tokenizer = await EnginePromptTokenizer.load(model.path);
  upstreams = [await startFakeUpstream(), await startFakeUpstream()];
  ctxr = await startProxy(
    { upstreams: upstreams.map((u) => u.url), promptTokenizer: tokenizer, blockSize: BLOCK, engine: "vllm" },
    { onProxy: (created) => void (proxy = created) },
  );
  for (const position of [0, 1]) proxy.cacheSync(position).connected!();
}, 120_000);

afterAll(async () => {
  await ctxr?.close();
  for (const u of upstreams ?? []) await u.stop();
  model?.cleanup();
});

let seq = 0;
const batch = (events: KvEventBatchIn["events"]): KvEventBatchIn => ({ ts: Date.now() / 1000, events, dataParallelRank: 0, layout: "map", unknownTypes: [], seq: BigInt(seq++), replayed: false });

/** BlockStored events (one chain) for the full blocks of `ids`, named by `name`. */
function stored(ids: number[], name: string): KvEventBatchIn {
  const full = Math.floor(ids.length / BLOCK);
  const hashes = Array.from({ length: full }, (_, i) => `${name}${i}`);
  return batch([{ type: "BlockStored", hashes, parent: null, tokenIds: ids.slice(0, full * BLOCK), blockSize: BLOCK, medium: "GPU", loraId: null, loraName: null, groupIdx: null }]);
}

const chat = (text: string) => ({ messages: [{ role: "user", content: text }], max_tokens: 4 });
/** Sends a chat request; which upstream got it. */
async function where(body: unknown): Promise<number> {
  const before = upstreams.map((u) => u.requests.length);
  expect((await ctxr.post("/v1/chat/completions", body)).status).toBe(200);
  const got = upstreams.findIndex((u, i) => u.requests.length > before[i]!);
  expect(got).toBeGreaterThanOrEqual(0);
  return got;
}

describe("routing on KV events", () => {
  // Each test starts from engines that hold nothing (prompts share the chat template's first blocks).
  beforeEach(() => {
    for (const position of [0, 1]) proxy.cacheSync(position).batch(batch([{ type: "AllBlocksCleared" }]));
  });

  test("a request goes to the engine that really holds its prompt's blocks, not to the idler one", async () => {
    const text = "A fairly long question about rivers, mills and the winter floods in the valley.";
    const ids = tokenizer.promptIds("chat", chat(text))!;
    proxy.cacheSync(1).batch(stored(ids, "e1-"));
    const before = upstreams.map((u) => u.requests.length);
    expect((await ctxr.post("/v1/chat/completions", chat(text))).status).toBe(200);
    expect(upstreams[1]!.requests.length).toBe(before[1]! + 1);
    expect(upstreams[0]!.requests.length).toBe(before[0]!);
    // /v1/stats: the mirror's blocks, and the tokens it predicted cached where the request went.
    const stats = (await ctxr.get("/v1/stats")).body;
    const second = stats.upstreams.find((u: { url: string }) => u.url === upstreams[1]!.url);
    expect(second.kv_events.blocks).toBe(Math.floor(ids.length / BLOCK));
    expect(second.kv_events.predicted_cached_tokens).toBe(Math.floor(ids.length / BLOCK) * BLOCK);
    expect((await ctxr.get("/metrics")).text).toContain("ctxr_upstream_mirrored_blocks");
  });

  test("predicted cached tokens are what the mirror showed when the request left, not what the engine's events for it then stored", async () => {
    const predicted = async () => ((await ctxr.get("/v1/stats")).body.upstreams as { kv_events: { predicted_cached_tokens: number } }[]).reduce((n, u) => n + u.kv_events.predicted_cached_tokens, 0);
    const before = await predicted();
    // Each engine stores the prompt and tells it before its answer's headers, as a real engine can.
    for (const [i, u] of upstreams.entries()) u.custom((r) => void proxy.cacheSync(i).batch(stored(tokenizer.promptIds("chat", r.json)!, `taken${i}-`)));
    try {
      await where(chat("A question nobody asked before, about the salt roads across the marshes."));
    } finally {
      for (const u of upstreams) u.recover();
    }
    expect((await predicted()) - before).toBe(0);
  });

  test("once the engine drops those blocks, neither holds them: the tie goes to the first listed", async () => {
    const text = "Another question, this one about the lighthouse keepers on the northern coast.";
    const ids = tokenizer.promptIds("chat", chat(text))!;
    proxy.cacheSync(1).batch(stored(ids, "drop-"));
    expect(await where(chat(text))).toBe(1);
    const full = Math.floor(ids.length / BLOCK);
    proxy.cacheSync(1).batch(batch([{ type: "BlockRemoved", hashes: Array.from({ length: full }, (_, i) => `drop-${i}`), medium: "GPU", groupIdx: null }]));
    expect(await where(chat(text))).toBe(0);
  });

  test("a context leaves the live index when its engine drops one of its blocks", async () => {
    const request = { messages: [{ role: "user", content: "What do the documents say?" }], documents: docs("alpha", "beta"), max_tokens: 4 };
    const target = await where(request);
    const forwarded = upstreams[target]!.last().json;
    const ids = tokenizer.promptIds("chat", forwarded)!;
    const contextsBefore = (await ctxr.get("/v1/stats")).body.contexts;
    // The engine reports the prompt stored, then drops its last block.
    proxy.cacheSync(target).batch(stored(ids, `ctx${target}-`));
    const full = Math.floor(ids.length / BLOCK);
    proxy.cacheSync(target).batch(batch([{ type: "BlockRemoved", hashes: [`ctx${target}-${full - 1}`], medium: "GPU", groupIdx: null }]));
    for (let i = 0; i < 50 && (await ctxr.get("/v1/stats")).body.contexts >= contextsBefore; i++) await sleep(20);
    expect((await ctxr.get("/v1/stats")).body.contexts).toBe(contextsBefore - 1);
    expect(proxy.cacheSync(target).stats.contextsEvicted).toBeGreaterThanOrEqual(1);
  });

  test("without live events on every candidate, routing falls back to the estimate", async () => {
    const text = "A question the estimate routes, since one engine's events are down.";
    const ids = tokenizer.promptIds("chat", chat(text))!;
    // The estimate has seen nothing of this prompt: the upstream with fewer requests so far gets it,
    // though the other one's mirror holds it.
    const requests = upstreams.map((u) => u.requests.length);
    const fewer = requests[0]! <= requests[1]! ? 0 : 1;
    proxy.cacheSync(1 - fewer).batch(stored(ids, "fallback-"));
    proxy.cacheSync(fewer).disconnected!();
    const before = { ...proxy.state().routing_decisions };
    expect(await where(chat(text))).toBe(fewer);
    // The degraded choice is counted, in /v1/stats and /metrics.
    expect(proxy.state().routing_decisions).toEqual({ ...before, estimate: before.estimate + 1, events_unavailable: before.events_unavailable + 1 });
    expect(await (await fetch(`${ctxr.url}/metrics`)).text()).toContain(`ctxr_proxy_routing_decisions_total{by="events_unavailable"} ${before.events_unavailable + 1}`);
    // Back and caught up with the engine's replay: events decide again.
    proxy.cacheSync(fewer).connected!();
    proxy.cacheSync(fewer).caughtUp!();
    proxy.cacheSync(1 - fewer).batch(stored(ids, "fallback-again-"));
    expect(await where(chat(text))).toBe(1 - fewer);
    expect(proxy.state().routing_decisions).toMatchObject({ events: before.events + 1, events_unavailable: before.events_unavailable + 1 });
  });

  test("--routing round-robin takes the upstreams in turn, whatever their caches hold", async () => {
    const text = "A question for the routing modes, about the old toll house.";
    const ids = tokenizer.promptIds("chat", chat(text))!;
    let proxy2: ContextProxy | undefined;
    const roundRobin = await startProxy({ upstreams: upstreams.map((u) => u.url), promptTokenizer: tokenizer, blockSize: BLOCK, routing: "round-robin" }, { onProxy: (created) => void (proxy2 = created) });
    try {
      for (const position of [0, 1]) {
        proxy2!.cacheSync(position).connected!();
        proxy2!.cacheSync(position).caughtUp!();
      }
      proxy2!.cacheSync(1).batch(stored(ids, "rr-"));
      const targets: number[] = [];
      for (let i = 0; i < 4; i++) {
        const before = upstreams.map((u) => u.requests.length);
        await roundRobin.post("/v1/chat/completions", chat(text));
        targets.push(upstreams.findIndex((u, k) => u.requests.length > before[k]!));
      }
      expect(targets).toEqual([0, 1, 0, 1]);
      expect(proxy2!.state().routing_decisions).toEqual({ events: 0, estimate: 0, round_robin: 4, events_unavailable: 0 });
    } finally {
      await roundRobin.close();
    }
  });
});
