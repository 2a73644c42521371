/**
 * KV-managed generation on quantized GGUF files (issue 14, item 4): a tiny Llama (hidden 256,
 * so that Q4_K blocks fit every projection's rows) written by `ctxr model quantize` at Q8_0 and
 * Q4_K, served through the HTTP API on the real CPU runner. Per file: chunk reuse at any position
 * with cachecraft and prophet recompute (counts as on f32 in kvGeneration.test.ts), exact recompute
 * (ratio 1) equal to full prefill, the prefix cache, the host tier, the disk tier across a restart
 * (and never across files: the disk identity is the GGUF header's), and sparse decode through a
 * `ctxr serve --model FILE.gguf` child with its steps counted.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { ContextService } from "../../src/online/contextService.ts";
import { startServer, type RunningServer } from "../../src/server/serve.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { client, spawnServer, type Client } from "./serverKit.ts";
import { chatOverDocuments as chat, DOCS } from "../helpers/kvGenerationKit.ts";

setDefaultTimeout(120_000);

const TYPES = ["q8_0", "q4_k"] as const;
type Type = (typeof TYPES)[number];

let model: { path: string; cleanup(): void };
let runnerPath = "";
let service: ContextService;
const files = {} as Record<Type, string>;
const opened: { engine: GenerationEngine; server: RunningServer }[] = [];
const scratch = tempFolder("ctxr-kv-quantized-");

async function open(file: string, options: Partial<Parameters<typeof GenerationEngine.open>[0]> = {}): Promise<{ engine: GenerationEngine; api: Client }> {
  const engine = await GenerationEngine.open({ model: file, runner: runnerPath, kvBlocks: 256, threads: 2, ...options });
  const server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
  opened.push({ engine, server });
  return { engine, api: client(server.url) };
}

beforeAll(async () => {
  runnerPath = buildRunner();
  model = tinyModelFolder({ layers: 3, seed: 11, hidden: 256, heads: 4, kvHeads: 2, intermediate: 512 }, "tiny-kv-q");
  for (const type of TYPES) {
    files[type] = join(scratch.path, `tiny-kv-${type}.gguf`);
    const summary = await quantizeModel({ input: model.path, output: files[type], type });
    // Every projection at the asked type (the output matrix is Q6_K in a q4_k file, as llama.cpp does).
    expect(summary.types[type.toUpperCase()]).toBeGreaterThanOrEqual(3 * 7);
  }
  service = await ContextService.open({ dataDir: null });
}, 300_000);

afterAll(async () => {
  for (const { engine, server } of opened) {
    await server.stop(1000);
    await engine.close();
  }
  await service?.close();
  model?.cleanup();
  scratch.cleanup();
});


describe.each(TYPES)("KV-managed generation on a %s GGUF", (type) => {
  let api: Client;
  let engine: GenerationEngine;
  beforeAll(async () => {
    ({ api, engine } = await open(files[type]));
    expect(engine.info.weight_dtype).toBe(type);
  });

  test("chunks are reused at other positions with cachecraft and prophet recompute", async () => {
    const first = await api.post("/v1/chat/completions", chat(DOCS));
    expect(first.status).toBe(200);
    expect(first.body.usage.ctxr.prompt_tokens_computed).toBe(first.body.usage.prompt_tokens);
    expect(first.body.usage.completion_tokens).toBe(6);
    for (const [policy, order] of [
      ["cachecraft", [DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!]],
      ["prophet", [DOCS[3]!, DOCS[2]!, DOCS[1]!, DOCS[0]!]],
    ] as const) {
      const answer = await api.post("/v1/chat/completions", chat(order, { ctxr: { policy, recompute_ratio: 0.25 } }));
      expect(answer.status).toBe(200);
      const u = answer.body.usage.ctxr;
      expect(u.policy).toBe(policy);
      expect(u.prompt_tokens_chunk_reused).toBeGreaterThan(50);
      expect(u.prompt_tokens_recomputed).toBe(Math.ceil(0.25 * (u.prompt_tokens_chunk_reused + u.prompt_tokens_recomputed)));
      expect(u.prompt_tokens_prefix_reused + u.prompt_tokens_chunk_reused + u.prompt_tokens_recomputed + u.prompt_tokens_computed).toBe(answer.body.usage.prompt_tokens);
      expect(u.tier_hits.device).toBe(5);
      expect(answer.body.usage.completion_tokens).toBe(6);
    }
  });

  test("recompute ratio 1 gives full prefill's greedy text; none reuses without recomputing", async () => {
    const order = [DOCS[1]!, DOCS[3]!, DOCS[0]!, DOCS[2]!];
    // A new order: its chunks are cached after other neighbours, so ratio 1 recomputes them all.
    const exact = await api.post("/v1/chat/completions", chat(order, { ctxr: { policy: "prophet", recompute_ratio: 1 } }));
    expect(exact.body.usage.ctxr.prompt_tokens_chunk_reused).toBe(0);
    expect(exact.body.usage.ctxr.prompt_tokens_recomputed).toBeGreaterThan(50);
    const full = await api.post("/v1/chat/completions", chat(order, { ctxr: { policy: "full" } }));
    expect(full.body.usage.ctxr.prompt_tokens_computed).toBe(full.body.usage.prompt_tokens);
    expect(exact.body.choices[0].message.content).toBe(full.body.choices[0].message.content);
    const none = await api.post("/v1/chat/completions", chat([DOCS[0]!, DOCS[2]!, DOCS[3]!, DOCS[1]!], { ctxr: { policy: "none" } }));
    expect(none.body.usage.ctxr.prompt_tokens_recomputed).toBe(0);
    expect(none.body.usage.ctxr.prompt_tokens_chunk_reused).toBeGreaterThan(50);
  });

  test("the prefix cache: the same prompt again starts from its cached blocks and answers the same", async () => {
    // Documents not seen before: the first request computes them exactly, so its blocks are cached.
    const order = [
      { text: "A brand new document about lighthouses and their keepers on the northern coast." },
      { text: "Another new document: fog horns, lamp oil, and the long winter nights." },
    ];
    const first = await api.post("/v1/chat/completions", chat(order));
    expect(first.body.usage.ctxr.prompt_tokens_chunk_reused).toBe(0);
    const again = await api.post("/v1/chat/completions", chat(order));
    expect(again.body.usage.ctxr.prompt_tokens_prefix_reused).toBe(Math.floor((again.body.usage.prompt_tokens - 1) / 16) * 16);
    expect(again.body.choices[0].message.content).toBe(first.body.choices[0].message.content);
  });

  test("the host tier: chunks kept only in host memory are found there", async () => {
    const host = await open(files[type], { kvDeviceBlocks: 0, kvHostBytes: 64 * 2 ** 20 });
    const a = await host.api.post("/v1/chat/completions", chat(DOCS));
    expect(a.status).toBe(200);
    expect(host.engine.chunkCache.stats.hostVariants).toBeGreaterThan(0);
    const b = await host.api.post("/v1/chat/completions", chat([DOCS[1]!, DOCS[0]!, DOCS[3]!, DOCS[2]!], { ctxr: { policy: "prophet", recompute_ratio: 0.25 } }));
    expect(b.body.usage.ctxr.tier_hits).toEqual({ device: 0, host: 5, disk: 0 });
    expect(b.body.usage.ctxr.prompt_tokens_chunk_reused).toBeGreaterThan(50);
  });

  test("the disk tier: caches written by one server are reused by the next on the same file, never by another file", async () => {
    const kvDir = join(scratch.path, `kv-${type}`);
    const first = await open(files[type], { kvDir, kvDeviceBlocks: 0, kvHostBytes: 0 });
    const a = await first.api.post("/v1/chat/completions", chat(DOCS));
    expect(a.status).toBe(200);
    expect(first.engine.chunkCache.stats.diskVariants).toBeGreaterThan(0);
    const second = await open(files[type], { kvDir });
    const b = await second.api.post("/v1/chat/completions", chat(DOCS));
    expect(b.body.usage.ctxr.tier_hits.disk + b.body.usage.ctxr.tier_hits.host).toBe(5);
    expect(b.body.usage.ctxr.prompt_tokens_computed).toBeLessThan(a.body.usage.ctxr.prompt_tokens_computed / 4);
    expect(b.body.choices[0].message.content).toBe(a.body.choices[0].message.content);
    // The other quantization of the same model has other weights, so other KV: nothing is restored.
    const other = await open(files[type === "q8_0" ? "q4_k" : "q8_0"], { kvDir });
    const c = await other.api.post("/v1/chat/completions", chat(DOCS));
    expect(c.body.usage.ctxr.tier_hits).toEqual({ device: 0, host: 0, disk: 0 });
    expect(c.body.usage.ctxr.prompt_tokens_computed).toBe(c.body.usage.prompt_tokens);
  });

  test("sparse decode through `ctxr serve --model FILE.gguf`: steps read a page subset, pages selected again on the trigger", async () => {
    const request = {
      prompt: Array.from({ length: 20 }, (_, i) => `Line ${i}: the quick brown fox jumps over the lazy dog.`).join("\n"),
      max_tokens: 24,
      temperature: 0,
      ctxr: { kv_budget: 0.05 },
    };
    const server = await spawnServer(
      ["--in-memory", "--model", files[type], "--threads", "2", "--kv-blocks", "128", "--sparse-entropy-threshold", "0.0001", "--sparse-varentropy-threshold", "0.0001", "--sparse-trigger-window", "1"],
      { CTXR_RUNNER: runnerPath },
      60_000,
    );
    try {
      const sparse = await server.post("/v1/completions", request);
      expect(sparse.status).toBe(200);
      expect(sparse.body.usage.completion_tokens).toBe(24);
      // Every token after the first is a sparse step, and each selects again under these thresholds.
      expect(sparse.body.usage.ctxr.sparse_decode_steps).toBe(23);
      expect(sparse.body.usage.ctxr.sparse_reconstructions).toBe(23);
      const dense = await server.post("/v1/completions", { ...request, ctxr: {} });
      expect(dense.body.usage.ctxr.sparse_decode_steps ?? 0).toBe(0);
      expect(dense.body.usage.completion_tokens).toBe(24);
    } finally {
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
    }
  });
});
