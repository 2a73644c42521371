/**
 * What ctxr saved, end to end: a real `serve --model` (tiny model, CPU runner) alone and behind a
 * real proxy (`serve --upstream`), both as child processes. After requests that miss and hit the
 * prefix cache, and documents reused as chunks (some tokens recomputed), /v1/stats' saved_tokens,
 * /metrics and the --stats-interval line give the same figures, and those are the sums of the
 * usage the clients got.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { runCli } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { chatOverDocuments, DOCS } from "../helpers/kvGenerationKit.ts";
import { parsePrometheusText } from "../helpers/prometheusText.ts";
import { spawnServer, stopSpawned, type SpawnedServer } from "./serverKit.ts";

const MODEL = "tiny";
const DOCUMENTS = [
  { id: "a", text: "The harbour of Lune freezes in the third month, and ships then winter in the southern docks of the town." },
  { id: "b", text: "Lune's lighthouse was rebuilt in stone after the great storm, its lamp now burning whale oil and later gas." },
  { id: "c", text: "Fishermen of Lune sell their catch at dawn in the market square, before the merchants open their stalls." },
];

interface Usage {
  prompt_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number };
  ctxr?: { prompt_tokens_chunk_reused: number; prompt_tokens_recomputed: number };
}

/** Sums of what the clients were told, in the saved-token report's terms. */
class UsageSums {
  requests = 0;
  prompt = 0;
  cached = 0;
  recomputed = 0;
  add(usage: Usage): void {
    this.requests++;
    this.prompt += usage.prompt_tokens;
    this.cached += (usage.prompt_tokens_details?.cached_tokens ?? 0) + (usage.ctxr?.prompt_tokens_chunk_reused ?? 0);
    this.recomputed += usage.ctxr?.prompt_tokens_recomputed ?? 0;
  }
}

let model: { path: string; cleanup(): void };
let engine: SpawnedServer;
let proxy: SpawnedServer;
const direct = new UsageSums();
const proxied = new UsageSums();
const directUsages: Usage[] = [];

async function chat(server: SpawnedServer, body: Record<string, unknown>): Promise<{ content: string; usage: Usage }> {
  const answer = await server.post("/v1/chat/completions", { model: MODEL, max_tokens: 3, temperature: 0, ...body });
  expect(answer.status).toBe(200);
  return { content: answer.body.choices[0].message.content, usage: answer.body.usage };
}

/** A streamed chat asking for usage in its last chunk. */
async function streamedChat(server: SpawnedServer, body: Record<string, unknown>): Promise<Usage> {
  const answer = await server.post("/v1/chat/completions", { model: MODEL, max_tokens: 3, temperature: 0, stream: true, stream_options: { include_usage: true }, ...body });
  expect(answer.status).toBe(200);
  const chunks = answer.text.split("\n").filter((line) => line.startsWith("data: {")).map((line) => JSON.parse(line.slice(6)));
  const usage = chunks.findLast((chunk) => chunk.usage)?.usage;
  expect(usage).toBeDefined();
  return usage;
}

async function savedTokens(server: SpawnedServer): Promise<any> {
  const stats = await server.get("/v1/stats");
  expect(stats.status).toBe(200);
  return stats.body.saved_tokens;
}

async function metrics(server: SpawnedServer) {
  const answer = await server.get("/metrics");
  expect(answer.status).toBe(200);
  return parsePrometheusText(answer.text);
}

/** The figures of the latest stats line's "since start" part (waits for one that shows `requests`). */
async function loggedTotals(server: SpawnedServer, requests: number): Promise<{ requests: number; prompt: number; cached: number; recomputed: number; line: string }> {
  const pattern = /since start: (\d+) requests, (\d+) prompt tokens, (\d+) cached \(hit rate [\d.]+%\), (\d+) recomputed/;
  const deadline = Date.now() + 10_000;
  for (;;) {
    const line = server.outputLines.findLast((l) => l.startsWith("ctxr stats: "));
    const match = line === undefined ? null : pattern.exec(line);
    if (match !== null && Number(match[1]) >= requests) return { requests: Number(match[1]), prompt: Number(match[2]), cached: Number(match[3]), recomputed: Number(match[4]), line: line! };
    if (Date.now() > deadline) throw new Error(`no stats line with ${requests} requests: ${JSON.stringify(server.outputLines.slice(-5))}`);
    await Bun.sleep(100);
  }
}

beforeAll(async () => {
  model = tinyModelFolder({}, MODEL);
  engine = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "256", "--threads", "1", "--stats-interval", "0.3"], { CTXR_RUNNER: buildRunner() }, 60_000);
  proxy = await spawnServer(["--in-memory", "--upstream", engine.url, "--stats-interval", "0.3"], {}, 60_000);

  // Straight to the engine: a prompt it has never seen (a miss), then the same again (a hit).
  const fresh = { messages: [{ role: "user", content: "Tell me everything about the old harbour town of Lune and its people, in many words." }] };
  for (let i = 0; i < 2; i++) {
    const { usage } = await chat(engine, fresh);
    direct.add(usage);
    directUsages.push(usage);
  }
  // Documents as chunks (usage.ctxr): computed once, then reused reordered, a quarter recomputed.
  for (const order of [DOCS, [DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!]]) {
    const answer = await engine.post("/v1/chat/completions", chatOverDocuments(order, { ctxr: { policy: "cachecraft", recompute_ratio: 0.25 } }));
    expect(answer.status).toBe(200);
    direct.add(answer.body.usage);
  }

  // Through the proxy: two documents turns, then a third turn streamed.
  const system = { role: "system", content: "Answer from the documents." };
  const first = { role: "user", content: "When does the harbour freeze?" };
  const turn1 = await chat(proxy, { messages: [system, first], documents: DOCUMENTS });
  proxied.add(turn1.usage);
  const second = { role: "user", content: "And the lighthouse?" };
  const history = [system, first, { role: "assistant", content: turn1.content }, second];
  const turn2 = await chat(proxy, { messages: history, documents: DOCUMENTS });
  proxied.add(turn2.usage);
  proxied.add(await streamedChat(proxy, { messages: [...history, { role: "assistant", content: turn2.content }, { role: "user", content: "Who sells fish?" }] }));
}, 300_000);

afterAll(async () => {
  await stopSpawned(proxy, engine);
  model?.cleanup();
}, 60_000);

describe("the engine alone", () => {
  test("a miss, then a hit: the client's usage says so", () => {
    expect(directUsages[0]!.prompt_tokens_details?.cached_tokens).toBe(0);
    expect(directUsages[1]!.prompt_tokens_details?.cached_tokens).toBeGreaterThan(0);
    expect(directUsages[1]!.prompt_tokens).toBe(directUsages[0]!.prompt_tokens);
  });

  test("/v1/stats' saved_tokens is the sum of every answer's usage (direct and proxied)", async () => {
    const saved = await savedTokens(engine);
    const all = { requests: direct.requests + proxied.requests, prompt: direct.prompt + proxied.prompt, cached: direct.cached + proxied.cached, recomputed: direct.recomputed + proxied.recomputed };
    expect(saved.engine).toMatchObject({ requests: all.requests, prompt_tokens: all.prompt, cached_tokens: all.cached, recomputed_tokens: all.recomputed });
    expect(saved.engine.prefix_cached_tokens + saved.engine.chunk_reused_tokens).toBe(saved.engine.cached_tokens);
    // Cached as a prefix, as reused chunks, and recomputed: each kind of saving is in the account.
    expect(saved.engine.prefix_cached_tokens).toBeGreaterThan(0);
    expect(saved.engine.chunk_reused_tokens).toBeGreaterThan(0);
    expect(saved.engine.recomputed_tokens).toBeGreaterThan(0);
    expect(saved.engine.computed_tokens).toBe(all.prompt - all.cached - all.recomputed);
    expect(saved.cached_tokens).toBeGreaterThan(0);
    expect(saved).toMatchObject({ requests: all.requests, prompt_tokens: all.prompt, cached_tokens: all.cached, cached_ratio: all.cached / all.prompt });
  });

  test("/metrics and the stats line give the same figures", async () => {
    const saved = await savedTokens(engine);
    const families = await metrics(engine);
    const value = (name: string) => families.get(name)!.samples[0]!.value;
    expect(value("ctxr_saved_tokens_prompt_total")).toBe(saved.prompt_tokens);
    expect(value("ctxr_saved_tokens_cached_total")).toBe(saved.cached_tokens);
    expect(value("ctxr_saved_tokens_requests_total")).toBe(saved.requests);
    expect(value("ctxr_engine_prefix_cached_tokens_total")).toBe(saved.engine.prefix_cached_tokens);
    expect(value("ctxr_engine_recomputed_tokens_total")).toBe(saved.engine.recomputed_tokens);
    const logged = await loggedTotals(engine, saved.requests);
    expect({ requests: logged.requests, prompt: logged.prompt, cached: logged.cached, recomputed: logged.recomputed }).toEqual({
      requests: saved.requests,
      prompt: saved.prompt_tokens,
      cached: saved.cached_tokens,
      recomputed: saved.recomputed_tokens,
    });
  });
});

describe("the proxy in front of it", () => {
  test("each upstream's figures: the engine's own reports in its tokens, received and forwarded in one named unit", async () => {
    const saved = await savedTokens(proxy);
    expect(saved.upstreams).toHaveLength(1);
    const upstream = saved.upstreams[0];
    expect(upstream).toMatchObject({ url: engine.url, unit: "estimate", requests: 3, usage_reports: 3, cached_tokens_reports: 3, prompt_tokens: proxied.prompt, cached_tokens: proxied.cached, recomputed_tokens: proxied.recomputed });
    expect(upstream.prompt_tokens_received).toBeGreaterThan(0);
    expect(upstream.prompt_tokens_forwarded).toBeGreaterThan(0);
    // The later turns found the earlier ones cached on the engine.
    expect(upstream.cached_tokens).toBeGreaterThan(0);
    expect(saved).toMatchObject({ requests: 3, prompt_tokens: proxied.prompt, cached_tokens: proxied.cached, recomputed_tokens: proxied.recomputed });
    // The upstream entry of /v1/stats reads the same account.
    const entry = (await proxy.get("/v1/stats")).body.upstreams[0];
    expect({ received: entry.prompt_tokens_received, forwarded: entry.prompt_tokens_forwarded, cached: entry.cached_tokens }).toEqual({ received: upstream.prompt_tokens_received, forwarded: upstream.prompt_tokens_forwarded, cached: upstream.cached_tokens });
  });

  test("/metrics and the stats line give the same figures", async () => {
    const saved = await savedTokens(proxy);
    const upstream = saved.upstreams[0];
    const families = await metrics(proxy);
    const sample = (name: string) => families.get(name)!.samples.find((s) => s.labels.upstream === engine.url)!.value;
    expect(sample("ctxr_upstream_prompt_tokens_total")).toBe(upstream.prompt_tokens);
    expect(sample("ctxr_upstream_cached_tokens_total")).toBe(upstream.cached_tokens);
    expect(sample("ctxr_upstream_prompt_tokens_received_total")).toBe(upstream.prompt_tokens_received);
    expect(sample("ctxr_upstream_prompt_tokens_forwarded_total")).toBe(upstream.prompt_tokens_forwarded);
    expect(families.get("ctxr_saved_tokens_cached_total")!.samples[0]!.value).toBe(saved.cached_tokens);
    const logged = await loggedTotals(proxy, saved.requests);
    expect({ requests: logged.requests, prompt: logged.prompt, cached: logged.cached }).toEqual({ requests: saved.requests, prompt: saved.prompt_tokens, cached: saved.cached_tokens });
    expect(logged.line).toContain(`proxy: ${upstream.prompt_tokens_received} received, ${upstream.prompt_tokens_forwarded} forwarded (estimate tokens)`);
  });

  test("/v1/stats' OpenAPI description documents saved_tokens", async () => {
    const document = (await proxy.get("/openapi.json")).body;
    const schema = document.components.schemas.SavedTokens;
    expect(Object.keys(schema.properties)).toEqual(expect.arrayContaining(["prompt_tokens", "cached_tokens", "recomputed_tokens", "cached_ratio", "engine", "upstreams"]));
    expect(document.components.schemas.StatsResponse.required).toContain("saved_tokens");
  });
});

describe("--stats-interval", () => {
  test("no line while there is no traffic", async () => {
    const count = engine.outputLines.filter((l) => l.startsWith("ctxr stats: ")).length;
    await Bun.sleep(1000);
    expect(engine.outputLines.filter((l) => l.startsWith("ctxr stats: ")).length).toBe(count);
  });

  test("bad values are usage errors naming the flag", () => {
    for (const value of ["-1", "soon", "100000"]) {
      const run = runCli(["serve", "--in-memory", "--stats-interval", value]);
      expect({ value, code: run.code }).toEqual({ value, code: 2 });
      expect(run.stderr).toContain("--stats-interval");
    }
  });
});

describe("a proxy that knows the model's tokenizer (--tokenizer, with --kv-events)", () => {
  let publishing: SpawnedServer;
  let counting: SpawnedServer;
  beforeAll(async () => {
    publishing = await spawnServer(["--in-memory", "--model", model.path, "--kv-blocks", "128", "--threads", "1", "--kv-events-publish", "tcp://127.0.0.1:0"], { CTXR_RUNNER: buildRunner() }, 60_000);
    const endpoint = /publishing KV events on (tcp:\/\/\S+)/.exec(publishing.startLines.join("\n"))![1]!;
    counting = await spawnServer(["--in-memory", "--upstream", publishing.url, "--kv-events", endpoint, "--tokenizer", model.path, "--stats-interval", "0"], {}, 60_000);
  }, 120_000);
  afterAll(async () => {
    for (const server of [counting, publishing]) {
      server?.kill("SIGTERM");
      await server?.exited;
    }
  }, 60_000);

  test("counts received and forwarded prompts in the model's tokens (the tiny model's are bytes), and says so", async () => {
    const question = "Where do ships winter?";
    const { usage } = await chat(counting, { messages: [{ role: "user", content: question }], documents: DOCUMENTS });
    const upstream = (await savedTokens(counting)).upstreams[0];
    expect(upstream.unit).toBe("tokenizer");
    // One token a byte: at least the question and the documents' text (4 characters a token would be a quarter of it).
    const bytes = question.length + DOCUMENTS.reduce((total, d) => total + d.text.length, 0);
    expect(upstream.prompt_tokens_received).toBeGreaterThanOrEqual(bytes);
    expect(upstream.prompt_tokens_forwarded).toBeGreaterThanOrEqual(bytes);
    // The template's own tokens come on top of the messages' in the engine's count.
    expect(upstream.prompt_tokens_forwarded).toBeLessThanOrEqual(usage.prompt_tokens);
    expect(upstream.prompt_tokens).toBe(usage.prompt_tokens);
    const families = await metrics(counting);
    expect(families.get("ctxr_upstream_token_unit")!.samples[0]!.labels.unit).toBe("tokenizer");
    // --stats-interval 0: no line at all.
    await Bun.sleep(300);
    expect(counting.outputLines.some((l) => l.startsWith("ctxr stats: "))).toBe(false);
  });
});
