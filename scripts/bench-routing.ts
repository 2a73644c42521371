/**
 * Routing on engines' KV events (issue 13 items 5 and 6).
 *
 *   npx bun scripts/bench-routing.ts [--quick] [--parts multiturn,rag,ttfb,cost,events] [--json OUT]
 *     [--tokenizer models/quality] [--block-size 16] [--engines 4] [--engine-cache-share 0.25]
 *     [--concurrency 8] [--doc-chars 256] [--prefill-ms-per-token 0.002] [--engine-load] [--modes round-robin,estimate,auto,auto:1]
 *     [--workload FILE] [--conversations 200] [--file-order] [--rag-workload FILE] [--rag-requests 2000]
 *     [--ttfb-requests 400] [--ttfb-doc-chars 4000]
 *
 * Parts:
 * 1. multiturn, rag: `--engines` fake engines (benchRoutingEngines.ts, one child process; each an
 *    LRU prefix cache publishing KV events over ZeroMQ, layouts map/array/mixed, bytes and integer
 *    hashes) behind `ctxr serve --upstream ×N --kv-events ×N --tokenizer DIR --block-size B
 *    --routing MODE` (spawned, in memory), fresh engines and proxy for each mode. Each engine
 *    holds `--engine-cache-share` of the workload's distinct prompt tokens (benchRoutingReplay's
 *    distinctPromptTokens; 0.25 × 4 engines: as many blocks as the workload has, which routing
 *    must spread so that each engine keeps its own part); the proxy gets `--capacity-tokens` for
 *    one engine's cache in its own estimate (4 characters a token). Requests stream, `--concurrency` at a time
 *    (benchRoutingReplay.ts). Reported: engine-reported cached tokens (the usage's cached_tokens,
 *    summed), requests per engine (max/min), the proxy's predicted_cached_tokens, TTFB (the first
 *    byte: the first token), end-to-end latency (the last byte) and the makespan (the whole
 *    workload). Without `--engine-load` an engine prefills `--prefill-ms-per-token` per uncached
 *    token and requests in flight never slow each other; with it, each engine runs the load model
 *    (test/helpers/fakeEngine/engineLoad.ts, DEFAULT_ENGINE_LOAD with that prefill cost): one
 *    batch at a time, prefills queued (chunked) and decode steps shared by the requests in
 *    flight, the answer streamed as its tokens are generated.
 * 2. ttfb: the proxy's added time to first byte (benchTtfb.ts: 15 documents of `--ttfb-doc-chars`
 *    through ctxr vs pre-rendered straight to an engine, alternating), journaled (the default
 *    mode), at 1 and 16 connections, without KV events (as before issue 13), with events only
 *    (the mirrors kept; routing by the estimate) and with events and --tokenizer (routing by
 *    the events, --routing auto), on engines without prefill time that tokenize with the fake
 *    engine's simple tokenizer (about 4 characters a token: the events carry a BPE-like number of
 *    blocks; the mirror's keys then never match the proxy's, which costs the same lookups).
 * 3. cost: the event work on the request path, in process (benchEventCost.ts requestCost), for the
 *    TTFB part's requests and the RAG workload's, each seen before (warm: the prompt tokenizer's
 *    span memo hits), and for TTFB-sized requests of documents never seen (cold: span misses).
 * 4. events: decode + mirror apply throughput (benchEventCost.ts eventThroughput).
 *
 * The tokenizer is byte-level (models/quality): a token is a byte, so prompts have about 4× the
 * tokens of a BPE tokenizer's for the same text.
 */
import { writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { loadModelTokenizer } from "../src/model/modelTokenizer.ts";
import { EnginePromptTokenizer } from "../src/proxy/enginePromptTokens.ts";
import { REPO, percentile, progress } from "./benchKit.ts";
import { eventThroughput, requestCost, type RequestCost } from "./benchEventCost.ts";
import { startEngines, startProxy } from "./benchRoutingFleet.ts";
import { distinctPromptTokens, multiTurnRequests, ragRequests, replay, type BenchRequest } from "./benchRoutingReplay.ts";
import { DOCS_PER_REQUEST, ttfbBodies, ttfbRun, type TtfbRow } from "./benchTtfb.ts";
import { documentText } from "./benchProxyUpstream.ts";
import { renderDocumentsField } from "../src/chat/documentsField.ts";
import { DEFAULT_ENGINE_LOAD } from "../test/helpers/fakeEngine/engineLoad.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean" },
    parts: { type: "string", default: "multiturn,rag,ttfb,cost,events" },
    json: { type: "string" },
    tokenizer: { type: "string", default: "models/quality" },
    "block-size": { type: "string", default: "16" },
    engines: { type: "string", default: "4" },
    "engine-cache-share": { type: "string", default: "0.25" },
    concurrency: { type: "string", default: "8" },
    "doc-chars": { type: "string", default: "256" },
    "prefill-ms-per-token": { type: "string", default: "0.002" },
    "engine-load": { type: "boolean" },
    modes: { type: "string", default: "round-robin,estimate,auto,auto:1" },
    workload: { type: "string", default: resolve(REPO, "../shared/workloads/data/multiturn_C200_T5_k15_o40.jsonl") },
    conversations: { type: "string" },
    "file-order": { type: "boolean" },
    "rag-workload": { type: "string", default: resolve(REPO, "../shared/workloads/data/zipf_N2000_k15.jsonl") },
    "rag-requests": { type: "string" },
    "ttfb-requests": { type: "string" },
    "ttfb-doc-chars": { type: "string", default: "4000" },
  },
});

const quick = values.quick === true;
const sized = (given: string | undefined, full: number, short: number) => (given === undefined ? (quick ? short : full) : Number(given));
const parts = new Set(values.parts!.split(","));
const tokenizerDir = resolve(values.tokenizer!);
const blockSize = Number(values["block-size"]);
const engineCount = Number(values.engines);
const cacheShare = Number(values["engine-cache-share"]);
const concurrency = Number(values.concurrency);
const docChars = Number(values["doc-chars"]);
const prefillMsPerToken = Number(values["prefill-ms-per-token"]);
const engineLoad = values["engine-load"] === true;
/** A mode: round-robin, estimate, auto, or auto:W (auto with --kv-overlap-weight W). */
const modes = values.modes!.split(",");
const lines: string[] = [];
const out = (...text: string[]) => lines.push(...text);
const summary: Record<string, unknown> = { quick, tokenizer: tokenizerDir, block_size: blockSize, engines: engineCount, engine_cache_share: cacheShare, concurrency, doc_chars: docChars, prefill_ms_per_token: prefillMsPerToken, engine_load: engineLoad ? { ...DEFAULT_ENGINE_LOAD, prefillMsPerToken } : null };
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const ms2 = (x: number) => x.toFixed(2);
const modelTokenizer = await loadModelTokenizer(tokenizerDir);

// ---------------------------------------------------------------------------------------------
// 1. Routing

interface ModeResult {
  mode: string;
  requests_per_engine: number[];
  load_max_over_min: number;
  prompt_tokens: number;
  cached_tokens: number;
  predicted_cached_tokens: number;
  proxy_cached_tokens: number;
  contexts_evicted: number;
  ttfb_ms: { p50: number; p99: number };
  e2e_ms: { p50: number; p99: number };
  mirror_blocks: number[];
  engine_blocks: number[];
  seconds: number;
}

async function routingRun(name: string, requests: BenchRequest[]) {
  progress(`${name}: ${requests.length} requests; counting the workload's distinct prompt tokens ...`);
  const tokens = distinctPromptTokens(requests, modelTokenizer, blockSize);
  const capacityBlocks = Math.max(1, Math.floor((cacheShare * tokens.distinct) / blockSize));
  const capacityTokens = Math.round((capacityBlocks * blockSize) / 4);
  const results: ModeResult[] = [];
  for (const mode of modes) {
    const engines = await startEngines({ engines: engineCount, blockSize, capacityBlocks, tokenizerDir, prefillMsPerToken, engineLoad, kvEvents: true });
    try {
      const [routing, weight] = mode.split(":") as ["auto" | "estimate" | "round-robin", string | undefined];
      const proxy = await startProxy(engines, { routing, tokenizerDir, blockSize, capacityTokens, journaled: false, overlapWeight: weight === undefined ? null : Number(weight) });
      try {
        const started = performance.now();
        const replies = await replay(proxy.url, requests, concurrency, (done) => {
          if (done % 200 === 0) progress(`${name} ${mode}: ${done}/${requests.length}`);
        });
        const seconds = (performance.now() - started) / 1000;
        const figures = await engines.stats();
        const upstreams = (await proxy.stats()).upstreams as any[];
        const perEngine = figures.map((f) => f.requests);
        const ttfb = replies.map((r) => r.ttfbMs);
        const e2e = replies.map((r) => r.e2eMs);
        results.push({
          mode,
          requests_per_engine: perEngine,
          load_max_over_min: Math.max(...perEngine) / Math.max(1, Math.min(...perEngine)),
          prompt_tokens: replies.reduce((n, r) => n + r.promptTokens, 0),
          cached_tokens: replies.reduce((n, r) => n + r.cachedTokens, 0),
          predicted_cached_tokens: upstreams.reduce((n, u) => n + (u.kv_events?.predicted_cached_tokens ?? 0), 0),
          proxy_cached_tokens: upstreams.reduce((n, u) => n + (u.cached_tokens ?? 0), 0),
          contexts_evicted: upstreams.reduce((n, u) => n + (u.kv_events?.contextsEvicted ?? 0), 0),
          ttfb_ms: { p50: percentile(ttfb, 0.5), p99: percentile(ttfb, 0.99) },
          e2e_ms: { p50: percentile(e2e, 0.5), p99: percentile(e2e, 0.99) },
          mirror_blocks: upstreams.map((u) => u.kv_events?.blocks ?? 0),
          engine_blocks: figures.map((f) => f.blocks),
          seconds,
        });
        progress(`${name} ${mode}: cached ${results.at(-1)!.cached_tokens} tokens, requests per engine ${perEngine.join("/")}, ${seconds.toFixed(1)} s`);
      } finally {
        await proxy.stop();
      }
    } finally {
      await engines.stop();
    }
  }
  const base = results.find((r) => r.mode === "round-robin");
  const estimate = results.find((r) => r.mode === "estimate");
  out(
    `### ${name}`,
    "",
    `${requests.length} requests, ${concurrency} at a time; workload ${tokens.prompt} prompt tokens as the client sends them, ${tokens.distinct} distinct (full ${blockSize}-token blocks by chained hash); ${engineCount} engines of ${capacityBlocks} blocks (${capacityBlocks * blockSize} tokens) each (${pct((capacityBlocks * blockSize) / tokens.distinct)} of the distinct tokens each); ${engineLoad ? `engine load model (steps of ${DEFAULT_ENGINE_LOAD.stepMs} ms + ${prefillMsPerToken} ms per prefilled token + ${DEFAULT_ENGINE_LOAD.kvMsPerToken} ms per KV token of the decoding sequences, ${DEFAULT_ENGINE_LOAD.maxBatchedTokens} tokens a step)` : `prefill ${prefillMsPerToken} ms per uncached token, requests in flight independent`}; proxy --capacity-tokens ${capacityTokens}.`,
    "",
    "| routing | requests per engine | max/min | prompt tokens (engines) | cached_tokens (engines) | vs round-robin | vs estimate | predicted by the mirrors | TTFB p50 / p99 ms | end-to-end p50 / p99 ms | makespan s | contexts evicted | mirror = engine blocks at the end |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ...results.map(
      (r) =>
        `| ${r.mode.replace(/^auto:(.+)$/, "auto, --kv-overlap-weight $1")} | ${r.requests_per_engine.join(" / ")} | ${r.load_max_over_min.toFixed(2)} | ${r.prompt_tokens} | ${r.cached_tokens} (${pct(r.cached_tokens / r.prompt_tokens)}) | ${base ? `${(r.cached_tokens / base.cached_tokens).toFixed(2)}×` : ""} | ${estimate ? `${(r.cached_tokens / estimate.cached_tokens).toFixed(2)}×` : ""} | ${r.predicted_cached_tokens} | ${ms2(r.ttfb_ms.p50)} / ${ms2(r.ttfb_ms.p99)} | ${ms2(r.e2e_ms.p50)} / ${ms2(r.e2e_ms.p99)} | ${r.seconds.toFixed(2)} | ${r.contexts_evicted} | ${r.mirror_blocks.every((b, i) => b === r.engine_blocks[i]) ? "yes" : `${r.mirror_blocks.join("/")} vs ${r.engine_blocks.join("/")}`} |`,
    ),
    "",
  );
  return { requests: requests.length, workload_prompt_tokens: tokens.prompt, distinct_tokens: tokens.distinct, capacity_blocks: capacityBlocks, proxy_capacity_tokens: capacityTokens, modes: results };
}

// ---------------------------------------------------------------------------------------------
// 2. Added TTFB, with and without events

async function partTtfb() {
  const total = sized(values["ttfb-requests"], 400, 100);
  const chars = Number(values["ttfb-doc-chars"]);
  const rows: (TtfbRow & { events: boolean; tokenizer: boolean })[] = [];
  const configs = [
    { events: false, tokenizer: false },
    { events: true, tokenizer: false },
    { events: true, tokenizer: true },
  ];
  for (const { events, tokenizer } of configs) {
    // Engines with the fake engine's cheap tokenizer: on two cores, engines tokenizing 60 kB prompts byte by byte would swamp the proxy's figures.
    const engines = await startEngines({ engines: engineCount, blockSize, capacityBlocks: 1 << 20, tokenizerDir: null, prefillMsPerToken: 0, kvEvents: events });
    try {
      const proxy = await startProxy(engines, { routing: events ? "auto" : null, tokenizerDir: tokenizer ? tokenizerDir : null, blockSize, capacityTokens: null, journaled: true });
      try {
        for (const connections of [1, 16]) {
          rows.push({ events, tokenizer, ...(await ttfbRun(engines.urls, proxy.url, connections, total, connections * 100_000, chars)) });
          progress(`ttfb: events ${events}, tokenizer ${tokenizer}, ${connections} connections: added p50 ${ms2(rows.at(-1)!.added.p50)} ms`);
        }
      } finally {
        await proxy.stop();
      }
    } finally {
      await engines.stop();
    }
  }
  out(
    `### Added time to first byte (journaled, ${engineCount} engines, 15 documents of ${chars} characters)`,
    "",
    "| proxy | connections | requests (each kind) | direct p50 | through ctxr p50 | added p50 | added p99 |",
    "|---|---:|---:|---:|---:|---:|---:|",
    ...rows.map((r) => `| ${r.tokenizer ? "--kv-events ×4 --tokenizer" : r.events ? "--kv-events ×4" : "no events"} | ${r.connections} | ${r.requests} | ${ms2(r.direct.p50)} | ${ms2(r.proxied.p50)} | **${ms2(r.added.p50)}** | ${ms2(r.added.p99)} |`),
    "",
  );
  return rows;
}

// ---------------------------------------------------------------------------------------------
// 3. Event work per request, 4. event throughput

async function partCost() {
  const tokenizer = await EnginePromptTokenizer.load(tokenizerDir);
  const count = quick ? 50 : 200;
  const ttfbChars = Number(values["ttfb-doc-chars"]);
  const sets: [string, Record<string, unknown>[]][] = [
    [`TTFB request (15 × ${ttfbChars} characters)`, Array.from({ length: count }, (_, i) => JSON.parse(ttfbBodies(i, ttfbChars).direct))],
    [`RAG request (15 × ${docChars} characters)`, ragRequests(values["rag-workload"]!, count, docChars).map((r) => ({ messages: r.plainMessages }))],
  ];
  const rows: (RequestCost & { label: string })[] = sets.map(([label, bodies]) => ({ label: `${label}, seen before`, ...requestCost(tokenizer, bodies, blockSize, engineCount) }));
  // Cold: prompts of documents never seen (the tokenizer, warmed up above, knows their words' pieces, not their spans).
  const fill = await EnginePromptTokenizer.load(tokenizerDir);
  const newDocuments = Array.from({ length: count }, (_, i) => {
    const documents = Array.from({ length: DOCS_PER_REQUEST }, (_, k) => ({ id: `new-${i}-${k}`, text: documentText(`new-${i}-${k}`, ttfbChars) }));
    return { messages: [{ role: "user", content: `${renderDocumentsField(documents)}\n\nQuestion ${i}: what do these documents have in common?` }] };
  });
  rows.push({ label: `TTFB request (15 × ${ttfbChars} characters), new documents`, ...requestCost(tokenizer, newDocuments, blockSize, engineCount, { firstSightFill: fill }) });
  out(
    "### Event work on the request path (in process, medians per request)",
    "",
    `| request | prompt tokens | tokenize ms | block keys ms | ${engineCount + 1} mirror lookups ms | total ms |`,
    "|---|---:|---:|---:|---:|---:|",
    ...rows.map((r) => `| ${r.label} | ${Math.round(r.promptTokens / r.requests)} | ${r.tokenizeMs.toFixed(3)} | ${r.hashMs.toFixed(3)} | ${r.lookupMs.toFixed(3)} | **${r.totalMs.toFixed(3)}** |`),
    "",
  );
  return rows;
}

function partEvents() {
  const prompts = ragRequests(values["rag-workload"]!, quick ? 300 : 2000, docChars).map((r) => modelTokenizer.encode(modelTokenizer.applyChatTemplate(r.plainMessages)));
  const total = prompts.reduce((n, p) => n + Math.floor(p.length / blockSize), 0);
  const capacity = Math.floor(total / 10);
  const rows = (["map", "array", "mixed"] as const).map((layout) => eventThroughput(prompts, blockSize, capacity, layout));
  out(
    `### Event throughput (decode + mirror apply, in process; batches from ${prompts.length} RAG prompts through an LRU cache of ${capacity} blocks)`,
    "",
    "| layout | batches | block events | s | of which decoding | block events/s |",
    "|---|---:|---:|---:|---:|---:|",
    ...rows.map((r) => `| ${r.layout} | ${r.batches} | ${r.blockEvents} | ${r.seconds.toFixed(3)} | ${r.decodeSeconds.toFixed(3)} | **${Math.round(r.blockEventsPerSecond)}** |`),
    "",
  );
  return rows;
}

// ---------------------------------------------------------------------------------------------

const command = `npx bun scripts/bench-routing.ts${process.argv.length > 2 ? ` ${process.argv.slice(2).join(" ")}` : ""}`;
out(`Command: \`${command}\` (Bun ${Bun.version}, ${cpus().length}× ${cpus()[0]?.model ?? "?"}; tokenizer ${tokenizerDir})`, "");
const started = performance.now();
if (parts.has("multiturn")) summary.multiturn = await routingRun("Multi-turn (multiturn_C200_T5_k15_o40)", multiTurnRequests(values.workload!, sized(values.conversations, 200, 40), docChars, values["file-order"] !== true));
if (parts.has("rag")) summary.rag = await routingRun(`Zipf RAG (${values["rag-workload"]!.split("/").pop()})`, ragRequests(values["rag-workload"]!, sized(values["rag-requests"], 2000, 400), docChars));
if (parts.has("ttfb")) summary.ttfb = await partTtfb();
if (parts.has("cost")) summary.cost = await partCost();
if (parts.has("events")) summary.events = partEvents();
summary.seconds = (performance.now() - started) / 1000;
out(`(${(summary.seconds as number).toFixed(1)} s in all)`);
process.stdout.write(`${lines.join("\n")}\n`);
if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(summary, null, 1)}\n`);
process.exit(0);
