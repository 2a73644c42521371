/**
 * Automatic prefix caching (issue 19, item 7): `ctxr serve --model` with the prefix cache on and
 * with --no-prefix-cache, each a server of its own, requests alternating between the two so drift
 * hits both alike (CPU runner; both servers idle while the other computes).
 *
 *   npx bun scripts/bench-prefix-cache.ts [--quick] [--parts chat,system,ttft,lookup,rag]
 *     [--model models/quality] [--threads N] [--json OUT]
 *     chat:   [--workload FILE] [--conversations 24] [--docs-per-turn 4] [--doc-chars 320]
 *             [--max-tokens 24] [--chat-kv-blocks 16384] [--history chat,tokens]
 *     system: [--system-chars 3000] [--system-requests 48] [--concurrency 4]
 *     ttft:   [--ttft-reps 7] [--long-tokens 7500] [--shared-tokens 7000]
 *     lookup: [--lookup-blocks 100000] [--lookup-prompts 2000,7500] [--lookup-repeats 300]
 *     rag:    [--rag-workload FILE] [--rag-requests 2000] [--rag-doc-chars 128]
 *             [--rag-cache-share 0.2] [--rag-proxy-capacity matched|unlimited] [--rag-system TEXT]
 *
 * Parts:
 * 1. chat: conversations of the multi-turn workload replayed turn by turn (arrival order, one
 *    request at a time): each user turn holds its first retrieved documents and a question, the
 *    greedy answer joins the history (benchPrefixChat.ts). Per turn n ≥ 2: cached tokens against
 *    the previous turn's prompt + answer, and against what could be reached at all.
 * 2. system: requests sharing a long system prompt, distinct short questions, in waves of
 *    `--concurrency` requests arriving together.
 * 3. ttft: a `--long-tokens` prompt whose first `--shared-tokens` tokens a request just before it
 *    had (cache on), against the same prompt on the cache-off server and against the priming
 *    request itself (a cold prefill); interleaved repetitions, each with a fresh prefix.
 * 4. lookup: PrefixBlockCache's admission bookkeeping with `--lookup-blocks` cached blocks
 *    (benchPrefixLookup.ts), in this process.
 * 5. rag: `ctxr serve --upstream` in front of `ctxr serve --model` on a Zipf RAG workload, the
 *    documents in the `documents` field, reordering on (the proxy's default) vs off
 *    (`"ctxr": {"reorder": false}`), one request at a time; the engine's KV cache holds
 *    `--rag-cache-share` of the workload's prompt tokens. For reference, the prefix-cache simulator
 *    on the same requests, in input order and reordered as the proxy does (benchOnlineReorderSimulation.ts).
 *
 * Every server gets two unrelated warm-up requests first (not counted).
 * TTFT: client-measured (request sent → first token's chunk, streaming) and the engine's
 * usage.ctxr.ttft_ms. Tables on stdout, progress on stderr.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { loadModelTokenizer } from "../src/model/modelTokenizer.ts";
import { estimateTokens } from "../src/online/blocks.ts";
import { renderDocumentsField } from "../src/chat/documentsField.ts";
import { spawnServer, type SpawnedServer } from "../test/server/serverKit.ts";
import { BENCH_MODELS, REPO, benchModelFolder, commonPrefixLength, median, percentile, progress } from "./benchKit.ts";
import { ChatReplay, type HistoryKind, type TurnRecord, type WorkloadTurn } from "./benchPrefixChat.ts";
import { simulateOnlineReorder } from "./benchOnlineReorderSimulation.ts";
import { type PrefixLookupResult, benchPrefixLookup } from "./benchPrefixLookup.ts";
import { documentText } from "./benchProxyUpstream.ts";
import { answerDifference, type StreamedAnswer, streamAnswer } from "./benchStreamedAnswer.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean" },
    parts: { type: "string", default: "chat,system,ttft,lookup,rag" },
    model: { type: "string", default: "models/quality" },
    threads: { type: "string", default: String(cpus().length) },
    json: { type: "string" },
    workload: { type: "string", default: resolve(REPO, "../shared/workloads/data/multiturn_C200_T5_k15_o40.jsonl") },
    conversations: { type: "string" },
    "docs-per-turn": { type: "string", default: "4" },
    "doc-chars": { type: "string", default: "320" },
    "max-tokens": { type: "string", default: "24" },
    "chat-kv-blocks": { type: "string", default: "16384" },
    history: { type: "string", default: "chat,tokens" },
    "system-chars": { type: "string", default: "3000" },
    "system-requests": { type: "string" },
    concurrency: { type: "string", default: "4" },
    "ttft-reps": { type: "string" },
    "long-tokens": { type: "string", default: "7500" },
    "shared-tokens": { type: "string", default: "7000" },
    "lookup-blocks": { type: "string", default: "100000" },
    "lookup-prompts": { type: "string", default: "2000,7500" },
    "lookup-repeats": { type: "string", default: "300" },
    "rag-workload": { type: "string", default: resolve(REPO, "samples/zipf_N2000_k15.jsonl") },
    "rag-requests": { type: "string" },
    "rag-doc-chars": { type: "string", default: "128" },
    "rag-cache-share": { type: "string", default: "0.2" },
    "rag-proxy-capacity": { type: "string", default: "matched" },
    "rag-system": { type: "string", default: "" },
  },
});

const quick = values.quick === true;
const sized = (given: string | undefined, full: number, short: number) => (given === undefined ? (quick ? short : full) : Number(given));
const parts = new Set(values.parts!.split(","));
const modelDir = values.model! in BENCH_MODELS ? benchModelFolder(values.model!) : resolve(values.model!);
const threads = values.threads!;
const BLOCK = 16;
const tokenizer = await loadModelTokenizer(modelDir);
const lines: string[] = [];
const summary: Record<string, unknown> = { model: modelDir, threads: Number(threads), quick };
const out = (...text: string[]) => lines.push(...text);
const ms = (x: number) => x.toFixed(1);
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

// ---------------------------------------------------------------------------------------------
// Servers and figures

/** A started server's first requests pay one-off costs (compiling, first use of KV memory): two unrelated requests, not counted. */
async function warmUp(url: string): Promise<void> {
  const text = documentText("warm-up", 1500);
  await streamAnswer(url, "chat", { max_tokens: 4, messages: [{ role: "user", content: `Warm up: ${text}` }] });
  await streamAnswer(url, "completions", { max_tokens: 4, prompt: `Warm-up completion: ${text}` });
}

async function startEngine(extra: string[]): Promise<SpawnedServer> {
  const server = await spawnServer(["--model", modelDir, "--in-memory", "--threads", threads, ...extra], {}, 120_000);
  await warmUp(server.url);
  return server;
}

async function stopAll(servers: readonly (SpawnedServer | undefined)[]): Promise<void> {
  await Promise.all(
    servers.map(async (server) => {
      if (server === undefined) return;
      server.kill("SIGTERM");
      await server.exited;
    }),
  );
}

async function modelId(url: string): Promise<string> {
  return ((await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] }).data[0]!.id;
}

async function prefixHitTokens(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/^ctxr_prefix_cache_hit_tokens_total (\d+)/m.exec(text)?.[1] ?? Number.NaN);
}

interface Measured {
  ttftClientMs: number;
  ttftServerMs: number;
  promptTokens: number;
  computedTokens: number;
  cachedTokens: number;
}

function measured(answer: StreamedAnswer): Measured {
  const { usage } = answer;
  return {
    ttftClientMs: answer.ttftMs,
    ttftServerMs: usage.ctxr?.ttft_ms ?? Number.NaN,
    promptTokens: usage.prompt_tokens,
    computedTokens: usage.ctxr?.prompt_tokens_computed ?? usage.prompt_tokens,
    cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

interface Figures {
  requests: number;
  ttft_client_ms: { p50: number; p99: number };
  ttft_server_ms: { p50: number; p99: number };
  prompt_tokens: number;
  computed_tokens: number;
  cached_tokens: number;
}

function figuresOf(rows: readonly Measured[]): Figures {
  const sum = (pick: (m: Measured) => number) => rows.reduce((n, m) => n + pick(m), 0);
  const quantiles = (pick: (m: Measured) => number) => ({ p50: percentile(rows.map(pick), 0.5), p99: percentile(rows.map(pick), 0.99) });
  return {
    requests: rows.length,
    ttft_client_ms: quantiles((m) => m.ttftClientMs),
    ttft_server_ms: quantiles((m) => m.ttftServerMs),
    prompt_tokens: sum((m) => m.promptTokens),
    computed_tokens: sum((m) => m.computedTokens),
    cached_tokens: sum((m) => m.cachedTokens),
  };
}

const FIGURES_HEADER = ["| cache | requests | TTFT p50 ms (client / engine) | TTFT p99 ms (client / engine) | prompt tokens | computed | cached_tokens |", "|---|---:|---:|---:|---:|---:|---:|"];

function figuresRow(label: string, f: Figures): string {
  return `| ${label} | ${f.requests} | ${ms(f.ttft_client_ms.p50)} / ${ms(f.ttft_server_ms.p50)} | ${ms(f.ttft_client_ms.p99)} / ${ms(f.ttft_server_ms.p99)} | ${f.prompt_tokens} | ${f.computed_tokens} | ${f.cached_tokens} (${pct(f.cached_tokens / f.prompt_tokens)}) |`;
}

/** Same tokens and logprobs (within 1e-4) on both servers: the count and the largest difference. */
function agreement(pairs: readonly [StreamedAnswer, StreamedAnswer][]): { same: number; of: number; max_abs_logprob_diff: number } {
  let same = 0;
  let max = 0;
  for (const [a, b] of pairs) {
    const d = answerDifference(a, b);
    if (d.sameTokens && d.maxAbsLogprobDiff <= 1e-4) same++;
    max = Math.max(max, d.maxAbsLogprobDiff);
  }
  return { same, of: pairs.length, max_abs_logprob_diff: max };
}

// ---------------------------------------------------------------------------------------------
// 1. Multi-turn chat

async function partChat(history: HistoryKind) {
  const conversations = sized(values.conversations, 24, 6);
  const turns = readFileSync(values.workload!, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as WorkloadTurn)
    .filter((t) => t.conv < conversations);
  const kvBlocks = ["--kv-blocks", values["chat-kv-blocks"]!];
  let on: SpawnedServer | undefined;
  let off: SpawnedServer | undefined;
  try {
    [on, off] = await Promise.all([startEngine(kvBlocks), startEngine([...kvBlocks, "--no-prefix-cache"])]);
    const options = {
      model: await modelId(on.url),
      systemPrompt: "You answer questions about the documents the user gives you. Be brief.",
      docsPerTurn: Number(values["docs-per-turn"]),
      docChars: Number(values["doc-chars"]),
      maxTokens: Number(values["max-tokens"]),
      blockSize: BLOCK,
      history,
    };
    const replayOn = new ChatReplay(on.url, tokenizer, options);
    const replayOff = new ChatReplay(off.url, tokenizer, options);
    for (const [i, turn] of turns.entries()) {
      await replayOn.turn(turn);
      await replayOff.turn(turn);
      if ((i + 1) % 20 === 0) progress(`chat (${history}): ${i + 1}/${turns.length} turns`);
    }
    return { history, conversations, turns: turns.length, on: replayOn.records, off: replayOff.records, options };
  } finally {
    await stopAll([on, off]);
  }
}

function turnShares(records: readonly TurnRecord[]) {
  const later = records.filter((r) => r.previousTokens !== null);
  const share = later.map((r) => r.cachedTokens / r.previousTokens!);
  const reachableShare = later.map((r) => r.reachable! / r.previousTokens!);
  const divergences = new Map<string, number>();
  for (const r of later) if (r.divergence !== null) divergences.set(`${r.divergence.generated} vs ${r.divergence.prompt}`, (divergences.get(`${r.divergence.generated} vs ${r.divergence.prompt}`) ?? 0) + 1);
  return {
    turns: later.length,
    share_median: median(share),
    share_min: Math.min(...share),
    share_at_least_95: share.filter((s) => s >= 0.95).length,
    reachable_share_median: median(reachableShare),
    cached_equals_reachable: later.filter((r) => r.cachedTokens === r.reachable).length,
    cached_below_reachable: later.filter((r) => r.cachedTokens < r.reachable!).length,
    cached_above_reachable: later.filter((r) => r.cachedTokens > r.reachable!).length,
    round_trip_whole_answer: later.filter((r) => r.divergence === null).length,
    diverges_at_median: median(later.map((r) => r.divergesAt!)),
    diverges_at_first_answer_token: later.filter((r) => r.divergesAt === 0).length,
    prompt_counts_agree: records.filter((r) => r.promptCountAgrees).length,
    divergences: [...divergences.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3),
  };
}

function reportChat(run: Awaited<ReturnType<typeof partChat>>) {
  const on = figuresOf(run.on);
  const off = figuresOf(run.off);
  const shares = turnShares(run.on);
  const same = agreement(run.on.map((r, i) => [r.answer, run.off[i]!.answer]));
  const how = run.history === "chat" ? "chat messages, the answer sent back as an assistant message" : "completions with token ids, the generated ids themselves in the history";
  out(
    `### 1. Multi-turn chat (${how})`,
    "",
    `${run.conversations} conversations × 5 turns (${run.turns} requests, arrival order, one at a time), first ${run.options.docsPerTurn} documents of each turn (${run.options.docChars} characters each), prompts ${Math.min(...run.on.map((r) => r.promptTokens))}–${Math.max(...run.on.map((r) => r.promptTokens))} tokens, greedy, max_tokens ${run.options.maxTokens}:`,
    "",
    ...FIGURES_HEADER,
    figuresRow("on", on),
    figuresRow("off", off),
    "",
    `Turns n ≥ 2 (${shares.turns}): cached_tokens / (turn n−1's prompt + completion tokens): median ${pct(shares.share_median)}, min ${pct(shares.share_min)}, ≥ 95% in ${shares.share_at_least_95}/${shares.turns}.`,
    `Reachable (turn n's prompt starting with turn n−1's written KV, whole blocks): median ${pct(shares.reachable_share_median)} of the previous tokens; cached = reachable in ${shares.cached_equals_reachable}/${shares.turns} turns (below: ${shares.cached_below_reachable}, above: ${shares.cached_above_reachable}).`,
    `Turn n−1's written KV (its prompt and every answer token but the last) is all in turn n's prompt in ${shares.round_trip_whole_answer}/${shares.turns} turns; the common prefix ends at answer token ${shares.diverges_at_median} (median; at the first in ${shares.diverges_at_first_answer_token}/${shares.turns})${shares.divergences.length > 0 ? `; most common (generated vs. re-rendered): ${shares.divergences.map(([what, n]) => `${what} (${n}×)`).join("; ")}` : ""}.`,
    `Prompt token counts computed here equal the engine's in ${shares.prompt_counts_agree}/${run.on.length}. Answers identical on vs. off (tokens, logprobs within 1e-4): ${same.same}/${same.of}, max |Δlogprob| ${same.max_abs_logprob_diff.toExponential(2)}.`,
    "",
  );
  return { history: run.history, conversations: run.conversations, options: run.options, on, off, turn_shares: shares, agreement: same };
}

// ---------------------------------------------------------------------------------------------
// 2. Shared system prompt

async function partSystem() {
  const requests = sized(values["system-requests"], 48, 12);
  const concurrency = Number(values.concurrency);
  const system = `You are the support assistant of a library. Follow the rules below.\n${documentText("system-prompt", Number(values["system-chars"]))}`;
  let on: SpawnedServer | undefined;
  let off: SpawnedServer | undefined;
  try {
    [on, off] = await Promise.all([startEngine([]), startEngine(["--no-prefix-cache"])]);
    const model = await modelId(on.url);
    const body = (i: number) => ({
      model,
      max_tokens: 16,
      temperature: 0,
      messages: [
        { role: "system", content: system },
        { role: "user", content: `Question ${i}: ${documentText(10_000 + i, 64).replace(/^Document \S+ begins\. /, "")}?` },
      ],
    });
    const answers = { on: [] as StreamedAnswer[], off: [] as StreamedAnswer[] };
    for (let wave = 0; wave < requests; wave += concurrency) {
      const ids = Array.from({ length: Math.min(concurrency, requests - wave) }, (_, j) => wave + j);
      answers.on.push(...(await Promise.all(ids.map((i) => streamAnswer(on!.url, "chat", body(i))))));
      answers.off.push(...(await Promise.all(ids.map((i) => streamAnswer(off!.url, "chat", body(i))))));
    }
    const onFigures = figuresOf(answers.on.map(measured));
    const offFigures = figuresOf(answers.off.map(measured));
    const same = agreement(answers.on.map((a, i) => [a, answers.off[i]!]));
    out(
      "### 2. Shared system prompt",
      "",
      `${requests} chat requests, a common system prompt of ${tokenizer.encode(system).length} tokens and distinct questions (prompts ${Math.min(...answers.on.map((a) => a.usage.prompt_tokens))}–${Math.max(...answers.on.map((a) => a.usage.prompt_tokens))} tokens), in waves of ${concurrency} arriving together, max_tokens 16:`,
      "",
      ...FIGURES_HEADER,
      figuresRow("on", onFigures),
      figuresRow("off", offFigures),
      "",
      `TTFT p50 on/off: ${(onFigures.ttft_client_ms.p50 / offFigures.ttft_client_ms.p50).toFixed(3)} (client), ${(onFigures.ttft_server_ms.p50 / offFigures.ttft_server_ms.p50).toFixed(3)} (engine). Answers identical on vs. off: ${same.same}/${same.of}, max |Δlogprob| ${same.max_abs_logprob_diff.toExponential(2)}.`,
      "",
    );
    return { requests, concurrency, on: onFigures, off: offFigures, agreement: same };
  } finally {
    await stopAll([on, off]);
  }
}

// ---------------------------------------------------------------------------------------------
// 3. A long prompt after its cached prefix

async function partTtft() {
  const reps = sized(values["ttft-reps"], 7, 5);
  const longTokens = Number(values["long-tokens"]);
  const sharedTokens = Number(values["shared-tokens"]);
  // Past documentText's "Document <label> begins." header, so that two texts differ from their first token on.
  const idsOf = (label: string, count: number) => tokenizer.encode(documentText(label, count * 2 + 200)).slice(64, 64 + count);
  const kvBlocks = ["--kv-blocks", String(Math.ceil((3 * longTokens) / BLOCK))];
  let on: SpawnedServer | undefined;
  let off: SpawnedServer | undefined;
  try {
    [on, off] = await Promise.all([startEngine(kvBlocks), startEngine([...kvBlocks, "--no-prefix-cache"])]);
    const model = await modelId(on.url);
    const ask = (url: string, prompt: number[]) => streamAnswer(url, "completions", { model, prompt, max_tokens: 8, temperature: 0 });
    // A warm-up pair, not counted.
    await ask(on.url, idsOf("warm-up", longTokens));
    await ask(off.url, idsOf("warm-up", longTokens));
    const rows = { cold: [] as StreamedAnswer[], warm: [] as StreamedAnswer[], off: [] as StreamedAnswer[] };
    for (let r = 0; r < reps; r++) {
      const head = idsOf(`head-${r}`, sharedTokens);
      const prime = [...head, ...idsOf(`tail-a-${r}`, longTokens - sharedTokens)];
      const prompt = [...head, ...idsOf(`tail-b-${r}`, longTokens - sharedTokens)];
      rows.cold.push(await ask(on.url, prime));
      rows.warm.push(await ask(on.url, prompt));
      rows.off.push(await ask(off.url, prompt));
      progress(`ttft: ${r + 1}/${reps}`);
    }
    const med = (answers: StreamedAnswer[], pick: (m: Measured) => number) => median(answers.map((a) => pick(measured(a))));
    const client = (m: Measured) => m.ttftClientMs;
    const server = (m: Measured) => m.ttftServerMs;
    const same = agreement(rows.warm.map((a, i) => [a, rows.off[i]!]));
    const result = {
      reps,
      long_tokens: longTokens,
      shared_tokens: sharedTokens,
      cached_tokens: median(rows.warm.map((a) => measured(a).cachedTokens)),
      ttft_ms: Object.fromEntries(Object.entries(rows).map(([k, answers]) => [k, { client: med(answers, client), engine: med(answers, server) }])),
      ratio_vs_off: { client: med(rows.warm, client) / med(rows.off, client), engine: med(rows.warm, server) / med(rows.off, server) },
      ratio_vs_cold: { client: med(rows.warm, client) / med(rows.cold, client), engine: med(rows.warm, server) / med(rows.cold, server) },
      agreement: same,
    };
    out(
      `### 3. A ${longTokens}-token prompt whose first ${sharedTokens} tokens are cached`,
      "",
      `${reps} interleaved repetitions (each: a cold request on the cache-on server that primes a fresh ${sharedTokens}-token prefix, the measured prompt on it, the same prompt on the cache-off server), /v1/completions with token ids, max_tokens 8; medians, ms:`,
      "",
      "| request | cached_tokens | TTFT client | TTFT engine |",
      "|---|---:|---:|---:|",
      `| cold prefill (priming request, cache on) | 0 | ${ms(result.ttft_ms.cold!.client)} | ${ms(result.ttft_ms.cold!.engine)} |`,
      `| same prompt, cache off | 0 | ${ms(result.ttft_ms.off!.client)} | ${ms(result.ttft_ms.off!.engine)} |`,
      `| prefix cached (cache on) | ${result.cached_tokens} | ${ms(result.ttft_ms.warm!.client)} | ${ms(result.ttft_ms.warm!.engine)} |`,
      "",
      `Cached / cold: **${result.ratio_vs_off.client.toFixed(3)}×** (client) / ${result.ratio_vs_off.engine.toFixed(3)}× (engine) against the cache-off server; ${result.ratio_vs_cold.client.toFixed(3)}× / ${result.ratio_vs_cold.engine.toFixed(3)}× against the priming request. Answers after the hit equal the cache-off server's (8 tokens, top-5 logprobs within 1e-4): ${same.same}/${same.of}, max |Δlogprob| ${same.max_abs_logprob_diff.toExponential(2)}.`,
      "",
    );
    return result;
  } finally {
    await stopAll([on, off]);
  }
}

// ---------------------------------------------------------------------------------------------
// 4. Admission lookup

function partLookup() {
  const cachedBlocks = Number(values["lookup-blocks"]);
  const repeats = Number(values["lookup-repeats"]);
  const rounds = 3;
  const rows = values["lookup-prompts"]!.split(",").map((tokens) => {
    const promptTokens = Number(tokens);
    // Each round fills a fresh cache: the spread between rounds shows how much the memory layout matters.
    return Array.from({ length: rounds }, () => benchPrefixLookup({ cachedBlocks, promptTokens, sharedTokens: Math.max(0, promptTokens - 500), blockSize: BLOCK, repeats }));
  });
  const us = (x: number) => (x * 1000).toFixed(1);
  const mid = (runs: PrefixLookupResult[], pick: (r: PrefixLookupResult) => number) => median(runs.map(pick));
  const spread = (runs: PrefixLookupResult[], pick: (r: PrefixLookupResult) => number) => `${us(Math.min(...runs.map(pick)))}–${us(Math.max(...runs.map(pick)))}`;
  out(
    "### 4. Admission lookup (PrefixBlockCache, in process)",
    "",
    `${cachedBlocks} cached blocks (unreferenced chains of whole prompts); per request, medians over ${repeats} requests, then the median of ${rounds} rounds (each a freshly filled cache; lookup: the rounds' range), µs:`,
    "",
    "| prompt tokens | blocks (hit) | hash the blocks (SHA-256) | lookup | the same lookup again | lookup, first block missing | acquire + release | admission (hash + lookup) |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...rows.map((runs) => {
      const r = runs[0]!;
      return `| ${r.promptTokens} | ${r.promptBlocks} (${r.hitBlocks}) | ${us(mid(runs, (x) => x.hashMs))} | **${us(mid(runs, (x) => x.lookupMs))}** (${spread(runs, (x) => x.lookupMs)}) | ${us(mid(runs, (x) => x.lookupAgainMs))} | ${us(mid(runs, (x) => x.lookupMissMs))} | ${us(mid(runs, (x) => x.acquireReleaseMs))} | ${us(mid(runs, (x) => x.hashMs + x.lookupMs))} |`;
    }),
    "",
  );
  return rows;
}

// ---------------------------------------------------------------------------------------------
// 5. Through the proxy: reordering on vs off

async function partRag() {
  const count = sized(values["rag-requests"], 2000, 200);
  const docChars = Number(values["rag-doc-chars"]);
  const share = Number(values["rag-cache-share"]);
  const contexts = readFileSync(values["rag-workload"]!, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .slice(0, count)
    .map((line) => JSON.parse(line) as (number | string)[]);
  const system = values["rag-system"]!;
  const question = (i: number) => `Question ${i}: which documents mention a ${["river", "market", "treaty", "planet", "garden"][i % 5]}?`;
  const documents = (blocks: (number | string)[]) => blocks.map((id) => ({ id: String(id), text: documentText(id, docChars) }));
  const messages = (i: number) => [...(system === "" ? [] : [{ role: "system", content: system }]), { role: "user", content: question(i) }];
  // Every prompt as the proxy forwards it in input order (no annotation): the workload's tokens, and the head all prompts share.
  const inputOrderIds = contexts.map((blocks, i) => {
    const plain = messages(i);
    const last = plain.pop()!;
    return tokenizer.encode(tokenizer.applyChatTemplate([...plain, { ...last, content: `${renderDocumentsField(documents(blocks))}\n\n${last.content}` }]));
  });
  const workloadTokens = inputOrderIds.reduce((n, ids) => n + ids.length, 0);
  const head = Math.min(...inputOrderIds.map((ids) => commonPrefixLength(ids, inputOrderIds[0]!)));
  const headBlocksTokens = Math.floor(head / BLOCK) * BLOCK;
  const kvBlocks = Math.ceil((share * workloadTokens) / BLOCK);
  const proxyTokens = Math.round(share * contexts.reduce((n, blocks) => n + documents(blocks).reduce((m, d) => m + estimateTokens(d.text), 0), 0));
  const proxyCapacity = values["rag-proxy-capacity"] === "matched" ? ["--capacity-tokens", String(proxyTokens)] : [];
  const servers: SpawnedServer[] = [];
  try {
    const engines = { on: await startEngine(["--kv-blocks", String(kvBlocks)]), off: await startEngine(["--kv-blocks", String(kvBlocks)]) };
    servers.push(engines.on, engines.off);
    const proxy = async (engine: SpawnedServer) => {
      const started = await spawnServer(["--in-memory", "--upstream", engine.url, ...proxyCapacity], {}, 60_000);
      await warmUp(started.url);
      return started;
    };
    const proxies = { on: await proxy(engines.on), off: await proxy(engines.off) };
    servers.push(proxies.on, proxies.off);
    const model = await modelId(engines.on.url);
    const answers = { on: [] as StreamedAnswer[], off: [] as StreamedAnswer[] };
    const warmUpHits = { on: await prefixHitTokens(engines.on.url), off: await prefixHitTokens(engines.off.url) };
    for (const [i, blocks] of contexts.entries()) {
      const body = { model, max_tokens: 4, temperature: 0, messages: messages(i), documents: documents(blocks) };
      answers.on.push(await streamAnswer(proxies.on.url, "chat", body, 0));
      answers.off.push(await streamAnswer(proxies.off.url, "chat", { ...body, ctxr: { reorder: false } }, 0));
      if ((i + 1) % 100 === 0) progress(`rag: ${i + 1}/${contexts.length} requests`);
    }
    const figures = { on: figuresOf(answers.on.map(measured)), off: figuresOf(answers.off.map(measured)) };
    const metrics = { on: (await prefixHitTokens(engines.on.url)) - warmUpHits.on, off: (await prefixHitTokens(engines.off.url)) - warmUpHits.off };
    const beyondHead = (mode: "on" | "off") => answers[mode].reduce((n, a) => n + Math.max(0, measured(a).cachedTokens - headBlocksTokens), 0);
    const beyond = { on: beyondHead("on"), off: beyondHead("off") };
    const ratio = figures.on.cached_tokens / figures.off.cached_tokens;
    const simulated = await simulateOnlineReorder(contexts, share);
    out(
      "### 5. Through the proxy: reordering on vs. off (Zipf RAG)",
      "",
      `${contexts.length} requests of ${values["rag-workload"]!.split("/").pop()} (15 documents of ${docChars} characters in the \`documents\` field, ${system === "" ? "no system prompt" : `a common ${tokenizer.encode(system).length}-token system prompt`}, distinct questions), one at a time (the two engines alternate), max_tokens 4; workload ${workloadTokens} prompt tokens in input order, all prompts share their first ${head} tokens; engine KV cache ${kvBlocks} blocks (${kvBlocks * BLOCK} tokens, ${pct((kvBlocks * BLOCK) / workloadTokens)}); proxy ${proxyCapacity.length > 0 ? `--capacity-tokens ${proxyTokens} (the same share in its own 4-characters-a-token estimate)` : "without --capacity-tokens"}:`,
      "",
      "| reordering | requests | TTFT p50 ms (client / engine) | TTFT p99 ms (client / engine) | prompt tokens | computed | cached_tokens | engine /metrics hit tokens (warm-up excluded) | cached beyond the common head |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
      ...(["on", "off"] as const).map((mode) => `${figuresRow(mode, figures[mode])} ${metrics[mode]} | ${beyond[mode]} |`),
      "",
      `Engine-reported cached tokens, reordering on / off: **${ratio.toFixed(2)}×** (beyond the common head: ${(beyond.on / beyond.off).toFixed(2)}×). Prompt tokens on / off: ${(figures.on.prompt_tokens / figures.off.prompt_tokens).toFixed(3)} (the priority annotation); computed tokens on / off: ${(figures.on.computed_tokens / figures.off.computed_tokens).toFixed(3)}.`,
      `The simulator on the same requests (a block a document, LRU at ${pct(share)} of them): input order ${pct(simulated.inputOrderHitRatio)}, reordered request by request in arrival order as the proxy does ${pct(simulated.reorderedHitRatio)} (${(simulated.reorderedHitRatio / simulated.inputOrderHitRatio).toFixed(2)}×).`,
      "",
    );
    return { simulated, requests: contexts.length, doc_chars: docChars, system_prompt: system, workload_tokens: workloadTokens, common_head_tokens: head, kv_blocks: kvBlocks, proxy_capacity_tokens: proxyCapacity.length > 0 ? proxyTokens : null, ...figures, metrics_hit_tokens: metrics, cached_beyond_head: beyond, ratio };
  } finally {
    await stopAll(servers);
  }
}

// ---------------------------------------------------------------------------------------------

const command = `npx bun scripts/bench-prefix-cache.ts${process.argv.length > 2 ? ` ${process.argv.slice(2).join(" ")}` : ""}`;
out(`Command: \`${command}\` (Bun ${Bun.version}, ${cpus().length}× ${cpus()[0]?.model ?? "?"}, ${threads} runner threads; model ${modelDir})`, "");
const started = performance.now();
if (parts.has("chat")) {
  if (!existsSync(values.workload!)) throw new Error(`no workload at ${values.workload} (give --workload FILE)`);
  summary.chat = [];
  for (const history of values.history!.split(",") as HistoryKind[]) (summary.chat as unknown[]).push(reportChat(await partChat(history)));
}
if (parts.has("system")) summary.system = await partSystem();
if (parts.has("ttft")) summary.ttft = await partTtft();
if (parts.has("lookup")) summary.lookup = partLookup();
if (parts.has("rag")) summary.rag = await partRag();
summary.seconds = (performance.now() - started) / 1000;
out(`(${ms(summary.seconds as number)} s in all)`);
process.stdout.write(`${lines.join("\n")}\n`);
if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(summary, null, 1)}\n`);
// The server kit's start-up timer would keep the process alive for a while.
process.exit(0);
