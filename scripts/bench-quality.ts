/**
 * Answer quality under KV reuse (issue 12, item 3), through the real server.
 *
 *   npx bun scripts/bench-quality.ts [--model models/quality] [--questions 300]
 *        [--families lookup,dependence,retrieval,order] [--policies full,prefix,none,cachecraft,prophet,epic]
 *        [--ratios 0.05,0.1,0.2,0.4] [--kv-budgets 0.01,0.02,0.05,0.1] [--retrieval-bytes 2048]
 *        [--seed 0xBE4C0000] [--threads 2] [--skip-sparse] [--skip-order-variants] [--json FILE]
 *        [--recall-questions 100] [--skip-recall] [--context-scores shift|attention]
 *        [--prophet-span-decay 0.8] [--prophet-query-rows all|last]
 *        [--prophet-scores attention|shift|product|rank-sum|shift-gated]
 *        [--recall-prophet-scores attention,product,...]
 *        [--store-policies cachecraft,prophet,epic,none,full] [--reuse-scoring sync,idle,idle-settled]
 *        [--sparse-anchor newest|newest-centered|window] [--sparse-anchor-tokens N] [--kv-blocks N]
 *        [--sparse-refine N] [--sparse-refine-lookback T]
 *
 * One `ctxr serve --model DIR --in-memory --port 0 --reuse-scoring sync` child for the whole run
 * (sync: the warm-up's variants carry their measured shift before the first question comes, as
 * they did before shifts were measured in the idle time). Examples come
 * from qualityTasks.ts, example i of family f from exampleSeed(seed + index of f, i): the
 * training script draws from seed 1's stream and its evaluation from 0x51A11E + family, so
 * the default seed base 0xBE4C0000 gives other examples.
 *
 * Per example (src/quality/qualityClient.ts): a warm-up request (policy cachecraft at ratio 0
 * unless --store-policies says otherwise) caches every chunk after other neighbours (dependence: the example's warmOrder, where the referrer follows another
 * record; the others: a seeded shuffle), then each cell asks the question in the example's
 * own order, greedy, with its policy and recompute ratio; `prefix`, which stores the
 * measured order, runs last. A cell is exact match over the questions with a 95% Wilson
 * interval; "reuse missing" counts the answers of none/cachecraft/prophet whose usage.ctxr
 * shows no chunk reused (a warm-up that did not take: those answers are not measuring reuse).
 *
 * The storing-policy axis (issue 31, item 7; src/quality/storeMatrix.ts): --store-policies
 * repeats the grid once per storing policy, the warm-ups using that policy, and --reuse-scoring
 * once per server mode (`idle`: the question comes right after the warm-up, so a variant may not
 * be scored yet; usage.ctxr.chunks_unscored counts it, and the "unscored" column counts the
 * answers that met one; `idle-settled`: idle, each question waiting until /v1/stats shows no
 * shift measurement pending). A fresh server for each (mode, storer), so no storer reuses another's
 * chunks. The warm-up reports how many chunks it stored (ctxr_kv_stored_total): an example whose
 * warm-up stored nothing (`full` stores nothing) is not asked under that storer, and the table
 * says so. The sections below the grid (order variants, TTFT, recall) come from the first
 * (mode, storer) only.
 *
 * Also: sparse decode (ctxr.kv_budget, dense prefill) on the retrieval family at
 * --retrieval-bytes; the order family's four variants (original/annotated × dedup) under
 * full prefill and prophet@0.2; TTFT (usage.ctxr.ttft_ms, medians) of each policy at ratio
 * 0.2 against full prefill on the longest family run; and, in-process on the same model
 * (src/quality/recomputeRecall.ts), which reused tokens cachecraft, prophet and epic recompute
 * against the ones whose KV is furthest from full prefill's (the oracle), on the dependence
 * family. --context-scores picks cachecraft's scores on the server and in that probe;
 * --prophet-scores prophet's on the server (and the probe's default), --recall-prophet-scores
 * a prophet row per scores in the probe (to compare them on the same examples).
 *
 * Prints the machine, the command and markdown tables on stdout (progress on stderr); the
 * last line is the whole result as JSON (also written to --json FILE).
 */
import { writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import {
  QualityClient,
  cellLabel,
  expectsChunkReuse,
  orderCells,
  RATIO_POLICIES,
  type QualityAnswer,
  type QualityCell,
  type QualityPolicy,
} from "../src/quality/qualityClient.ts";
import { parseReuseScoringModes, parseStorePolicies, serverReuseScoring, warmUpStored, WarmUpTally, type ReuseScoringMode } from "../src/quality/storeMatrix.ts";
import { exampleSeed } from "../src/quality/qualityRandom.ts";
import { RECALL_POLICIES, RecomputeRecall, type RecallCell, type RecallPolicy, type RecallResult } from "../src/quality/recomputeRecall.ts";
import { findRunner } from "../src/runner/runnerExecutable.ts";
import { CONTEXT_SCORES, type ContextScores } from "../src/kv/reuseScores.ts";
import { DEFAULT_PROPHET_SCORES, DEFAULT_PROPHET_SPAN_DECAY, PROPHET_QUERY_ROWS, PROPHET_SCORES, type ProphetQueryRows, type ProphetScores } from "../src/kv/recomputeSelection.ts";
import { DEFAULT_ANCHOR_TOKENS, DEFAULT_SPARSE_ANCHOR } from "../src/kv/sparseAnchor.ts";
import {
  DEFAULT_RETRIEVAL_BYTES,
  QUALITY_FAMILIES,
  qualityExample,
  type OrderVariant,
  type QualityExample,
  type QualityFamily,
  type QualityOptions,
} from "../src/quality/qualityTasks.ts";

const REPO = resolve(import.meta.dir, "..");
const CLI_ENTRY = join(REPO, "src", "cli", "main.ts");
const POLICIES: readonly QualityPolicy[] = ["full", "prefix", "none", "cachecraft", "prophet", "epic"];
const TTFT_RATIO = 0.2;

const { values } = parseArgs({
  options: {
    model: { type: "string", default: join(REPO, "models", "quality") },
    questions: { type: "string", default: "300" },
    families: { type: "string", default: QUALITY_FAMILIES.join(",") },
    policies: { type: "string", default: POLICIES.join(",") },
    ratios: { type: "string", default: "0.05,0.1,0.2,0.4" },
    "kv-budgets": { type: "string", default: "0.01,0.02,0.05,0.1" },
    "retrieval-bytes": { type: "string", default: String(DEFAULT_RETRIEVAL_BYTES) },
    seed: { type: "string", default: "0xBE4C0000" },
    threads: { type: "string", default: "2" },
    "skip-sparse": { type: "boolean" },
    "skip-order-variants": { type: "boolean" },
    "recall-questions": { type: "string", default: "100" },
    "context-scores": { type: "string", default: "shift" },
    "prophet-span-decay": { type: "string", default: String(DEFAULT_PROPHET_SPAN_DECAY) },
    "prophet-query-rows": { type: "string", default: "all" },
    "prophet-scores": { type: "string", default: DEFAULT_PROPHET_SCORES },
    "recall-prophet-scores": { type: "string" },
    "skip-recall": { type: "boolean" },
    "store-policies": { type: "string", default: "cachecraft" },
    "reuse-scoring": { type: "string", default: "sync" },
    // Passed to the server as they are (it says what is wrong with a bad value).
    "sparse-anchor": { type: "string", default: DEFAULT_SPARSE_ANCHOR },
    "sparse-anchor-tokens": { type: "string", default: String(DEFAULT_ANCHOR_TOKENS) },
    "sparse-refine": { type: "string" },
    "sparse-refine-lookback": { type: "string" },
    // The server's KV blocks (its default holds 8,192 tokens: an 8,192-byte retrieval prompt needs more).
    "kv-blocks": { type: "string" },
    json: { type: "string" },
  },
});

const list = (text: string) => text.split(",").map((s) => s.trim()).filter((s) => s.length > 0);
const questions = Number(values.questions);
const families = list(values.families!) as QualityFamily[];
const policies = list(values.policies!) as QualityPolicy[];
const ratios = list(values.ratios!).map(Number);
const kvBudgets = list(values["kv-budgets"]!).map(Number);
const retrievalBytes = Number(values["retrieval-bytes"]);
const seedBase = Number(values.seed) >>> 0;
const threads = Number(values.threads);
const contextScores = values["context-scores"] as ContextScores;
const spanDecay = Number(values["prophet-span-decay"]);
const queryRows = values["prophet-query-rows"] as ProphetQueryRows;
const prophetScores = values["prophet-scores"] as ProphetScores;
const storePolicies = parseStorePolicies(values["store-policies"]!);
const reuseScoringModes = parseReuseScoringModes(values["reuse-scoring"]!);
const recallProphetScores = list(values["recall-prophet-scores"] ?? prophetScores) as ProphetScores[];
for (const s of [prophetScores, ...recallProphetScores]) if (!PROPHET_SCORES.includes(s)) throw new Error(`--prophet-scores must be one of ${PROPHET_SCORES.join(", ")} (got '${s}')`);
if (!PROPHET_QUERY_ROWS.includes(queryRows)) throw new Error(`--prophet-query-rows must be one of ${PROPHET_QUERY_ROWS.join(", ")}`);
if (!CONTEXT_SCORES.includes(contextScores)) throw new Error(`--context-scores must be one of ${CONTEXT_SCORES.join(", ")}`);
for (const f of families) if (!QUALITY_FAMILIES.includes(f)) throw new Error(`unknown family '${f}' (${QUALITY_FAMILIES.join(", ")})`);
for (const p of policies) if (!POLICIES.includes(p)) throw new Error(`unknown policy '${p}' (${POLICIES.join(", ")})`);
if (!Number.isInteger(questions) || questions < 1) throw new Error(`--questions must be a positive integer`);

const progress = (line: string) => process.stderr.write(`${line}\n`);

// ---------------------------------------------------------------------------
// Statistics

/** The 95% Wilson score interval of `correct` successes in `n`. */
function wilson(correct: number, n: number, z = 1.959964): [number, number] {
  if (n === 0) return [0, 1];
  const p = correct / n;
  const z2 = z * z;
  const centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const half = (z / (1 + z2 / n)) * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n));
  return [correct === 0 ? 0 : Math.max(0, centre - half), correct === n ? 1 : Math.min(1, centre + half)];
}

function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** One cell's tally. */
class Tally {
  n = 0;
  correct = 0;
  stale = 0;
  staleAsked = 0;
  reuseMissing = 0;
  /** Answers that reused at least one chunk whose variant had no measured shift yet. */
  unscoredAnswers = 0;
  unscoredChunks = 0;
  sparseSteps = 0;
  promptTokens = 0;
  readonly ttft: number[] = [];
  readonly recomputed: number[] = [];

  constructor(readonly cell: QualityCell) {}

  add(example: QualityExample, answer: QualityAnswer): void {
    this.n++;
    if (answer.correct) this.correct++;
    if (example.stale !== undefined) {
      this.staleAsked++;
      if (answer.stale) this.stale++;
    }
    if (expectsChunkReuse(this.cell) && !answer.chunksReused) this.reuseMissing++;
    this.promptTokens += answer.promptTokens;
    if (answer.usage !== null) {
      this.ttft.push(answer.usage.ttft_ms);
      this.recomputed.push(answer.usage.prompt_tokens_recomputed);
      this.sparseSteps += answer.usage.sparse_decode_steps ?? 0;
      const unscored = answer.usage.chunks_unscored ?? 0;
      if (unscored > 0) this.unscoredAnswers++;
      this.unscoredChunks += unscored;
    }
  }

  get accuracy(): number {
    return this.n === 0 ? NaN : this.correct / this.n;
  }

  summary() {
    const [low, high] = wilson(this.correct, this.n);
    return {
      cell: cellLabel(this.cell),
      policy: this.cell.policy,
      ratio: this.cell.ratio ?? null,
      kv_budget: this.cell.kvBudget ?? null,
      n: this.n,
      correct: this.correct,
      accuracy: this.accuracy,
      ci95: [low, high] as [number, number],
      stale_rate: this.staleAsked === 0 ? null : this.stale / this.staleAsked,
      reuse_missing: expectsChunkReuse(this.cell) ? this.reuseMissing : null,
      unscored_answers: this.unscoredAnswers,
      unscored_chunks: this.unscoredChunks,
      ttft_ms_median: median(this.ttft),
      recomputed_tokens_median: median(this.recomputed),
      mean_prompt_tokens: this.n === 0 ? 0 : this.promptTokens / this.n,
      sparse_decode_steps: this.sparseSteps,
    };
  }
}

// ---------------------------------------------------------------------------
// The server

interface Server {
  url: string;
  stop(): Promise<void>;
}

async function startServer(model: string, reuseScoring: ReuseScoringMode): Promise<Server> {
  // Without the automatic prefix cache: a full prefill's exact blocks would serve the reusing
  // cells of the same prompt, and the policies' own quality would go unmeasured.
  const child = Bun.spawn([process.execPath, CLI_ENTRY, "serve", "--model", model, "--in-memory", "--port", "0", "--threads", String(threads), "--context-scores", contextScores, "--prophet-span-decay", String(spanDecay), "--prophet-query-rows", queryRows, "--prophet-scores", prophetScores, "--no-prefix-cache", "--reuse-scoring", serverReuseScoring(reuseScoring), ...(values["kv-blocks"] !== undefined ? ["--kv-blocks", values["kv-blocks"]] : []), "--sparse-anchor", values["sparse-anchor"]!, ...(values["sparse-anchor"] === "window" ? [] : ["--sparse-anchor-tokens", values["sparse-anchor-tokens"]!]), ...(["sparse-refine", "sparse-refine-lookback"] as const).flatMap((flag) => (values[flag] !== undefined ? [`--${flag}`, values[flag]] : []))], {
    cwd: REPO,
    env: { ...process.env, NO_COLOR: "1" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = child.stdout.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  let url: string | null = null;
  const deadline = Date.now() + 120_000;
  while (url === null) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), Math.max(0, deadline - Date.now()))));
    const read = await Promise.race([reader.read(), timeout]);
    clearTimeout(timer);
    if (read === "timeout" || read.done) {
      child.kill(9);
      throw new Error(`ctxr serve did not start (stdout so far: ${JSON.stringify(buffered)})`);
    }
    buffered += decoder.decode(read.value, { stream: true });
    const match = /ctxr serve: listening on (http:\/\/\S+)/.exec(buffered);
    if (match) url = match[1]!;
  }
  // Keep draining stdout so the child never blocks on a full pipe.
  void (async () => {
    for (;;) if ((await reader.read()).done) break;
  })();
  return {
    url,
    async stop() {
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill(9), 5000);
      await child.exited;
      clearTimeout(killer);
    },
  };
}

// ---------------------------------------------------------------------------
// Runs

function examplesOf(family: QualityFamily, options: QualityOptions = {}): QualityExample[] {
  const set = (seedBase + QUALITY_FAMILIES.indexOf(family)) >>> 0;
  const opts: QualityOptions = { retrievalBytes, ...options };
  return Array.from({ length: questions }, (_, i) => qualityExample(family, exampleSeed(set, i), opts));
}

/**
 * Asks every example under every cell (one warm-up per example, by `storer`); one tally per cell.
 * An example whose warm-up stored no chunk is not asked (see the header).
 */
async function runCells(
  client: QualityClient,
  name: string,
  examples: readonly QualityExample[],
  cells: readonly QualityCell[],
  storer: QualityPolicy = storePolicies[0]!,
  warmUps = new WarmUpTally(),
  settle = false,
): Promise<Tally[]> {
  const ordered = orderCells(cells);
  const tallies = new Map(ordered.map((c) => [cellLabel(c), new Tally(c)] as const));
  const started = performance.now();
  for (let i = 0; i < examples.length; i++) {
    const example = examples[i]!;
    const warmUp = await client.warmUp(example, storer);
    warmUps.add(warmUp);
    if (settle) warmUps.settledMs.push(await client.settleScoring());
    if (warmUpStored(warmUp)) for (const cell of ordered) tallies.get(cellLabel(cell))!.add(example, await client.ask(example, cell));
    if ((i + 1) % 25 === 0 || i + 1 === examples.length) {
      const seconds = (performance.now() - started) / 1000;
      progress(`${name}: ${i + 1}/${examples.length} examples, ${seconds.toFixed(0)} s`);
    }
  }
  return cells.map((c) => tallies.get(cellLabel(c))!);
}

function gridCells(family: QualityFamily): QualityCell[] {
  const cells: QualityCell[] = [];
  for (const policy of policies) {
    if (RATIO_POLICIES.includes(policy)) for (const ratio of ratios) cells.push({ policy, ratio });
    else cells.push({ policy });
  }
  if (family === "retrieval" && !values["skip-sparse"]) {
    if (!cells.some((c) => c.policy === "full")) cells.unshift({ policy: "full" });
    for (const kvBudget of kvBudgets) cells.push({ policy: "full", kvBudget });
  }
  return cells;
}

const pct = (x: number | null) => (x === null || Number.isNaN(x) ? "–" : (100 * x).toFixed(1));
const accuracyText = (s: ReturnType<Tally["summary"]>) => `${pct(s.accuracy)} [${pct(s.ci95[0])}, ${pct(s.ci95[1])}]`;

type CellSummary = ReturnType<Tally["summary"]>;
/** One (reuse scoring mode, storing policy) run of the grid, on its own server. */
interface StoreRun {
  reuse_scoring: ReuseScoringMode;
  stored_by: QualityPolicy;
  /** Per family: what the warm-ups stored. */
  warm_up: Record<string, ReturnType<WarmUpTally["summary"]>>;
  grid: Record<string, CellSummary[]>;
  /** /v1/stats at the end of the run: shift measurements done, and still waiting. */
  scoring: { scored: number; pending: number } | null;
}
const storeRuns: StoreRun[] = [];
const orderVariants: { order: OrderVariant; dedup: boolean; cells: CellSummary[] }[] = [];
for (const mode of reuseScoringModes) {
  for (const storer of storePolicies) {
    const first = storeRuns.length === 0;
    const run: StoreRun = { reuse_scoring: mode, stored_by: storer, warm_up: {}, grid: {}, scoring: null };
    const server = await startServer(values.model!, mode);
    const client = new QualityClient(server.url);
    const tag = reuseScoringModes.length > 1 || storePolicies.length > 1 ? ` (${mode}, stored by ${storer})` : "";
    try {
      for (const family of families) {
        const warmUps = new WarmUpTally();
        const tallies = await runCells(client, `${family}${tag}`, examplesOf(family), gridCells(family), storer, warmUps, mode === "idle-settled");
        run.grid[family] = tallies.map((t) => t.summary());
        run.warm_up[family] = warmUps.summary();
      }
      run.scoring = await client.scoringQueue();
      if (first && families.includes("order") && !values["skip-order-variants"]) {
        const cells: QualityCell[] = [{ policy: "full" }, { policy: "prophet", ratio: TTFT_RATIO }];
        for (const order of ["original", "annotated"] as const) {
          for (const dedup of [false, true]) {
            const tallies = await runCells(client, `order ${order} dedup ${dedup}`, examplesOf("order", { order, dedup }), cells, storer);
            orderVariants.push({ order, dedup, cells: tallies.map((t) => t.summary()) });
          }
        }
      }
    } finally {
      await server.stop();
    }
    storeRuns.push(run);
  }
}
/** The first run whose warm-ups stored chunks: the sections below the grid (and the JSON's `grid`) read it. */
const grid = (storeRuns.find((r) => Object.values(r.warm_up).some((w) => w.chunks_stored > 0)) ?? storeRuns[0]!).grid;

// Recall of the recompute sets against the oracle (in-process: the server does not say which tokens it recomputed).
type RecallRow = { cell: string; questions: number; budget_median: number; recall: number; coverage: number; referrer_value_recall: number | null; first_token_agrees: number };
let recall: { family: string; questions: number; none_first_token_agrees: number; oracle_referrer_rank_median: number | null; rows: RecallRow[] } | null = null;
const recallCells: RecallCell[] = policies
  .filter((p): p is RecallPolicy => (RECALL_POLICIES as readonly string[]).includes(p))
  .flatMap((policy): Omit<RecallCell, "ratio">[] => (policy === "prophet" ? recallProphetScores.map((prophetScores) => ({ policy, prophetScores })) : [{ policy }]))
  .flatMap((cell) => ratios.map((ratio) => ({ ...cell, ratio })));
/** "prophet@0.2", or "prophet product@0.2" when the probe compares several prophet scores. */
const recallLabel = (c: RecallCell) => `${c.policy}${c.policy === "prophet" && recallProphetScores.length > 1 ? ` ${c.prophetScores}` : ""}@${c.ratio}`;
if (!values["skip-recall"] && families.includes("dependence") && recallCells.length > 0) {
  const n = Number(values["recall-questions"]);
  const probe = await RecomputeRecall.open({ executable: await findRunner("cpu", { log: () => {} }), model: values.model!, threads, contextScores, prophetSpanDecay: spanDecay, prophetQueryRows: queryRows, prophetScores });
  try {
    const per = new Map(recallCells.map((c) => [recallLabel(c), [] as RecallResult[]] as const));
    let noneAgrees = 0;
    const referrerRanks: number[] = [];
    const examples = examplesOf("dependence").slice(0, n);
    for (let i = 0; i < examples.length; i++) {
      const example = examples[i]!;
      const measured = await probe.measure(example, recallCells);
      if (measured.noneAgrees) noneAgrees++;
      const rank = measured.oracle.findIndex((o) => measured.referrerValuePositions.includes(o.position));
      if (rank >= 0) referrerRanks.push(rank + 1);
      for (const r of measured.cells) per.get(recallLabel(r.cell))!.push(r);
      if ((i + 1) % 25 === 0 || i + 1 === examples.length) progress(`recall: ${i + 1}/${examples.length} examples`);
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
    recall = {
      family: "dependence",
      questions: examples.length,
      none_first_token_agrees: noneAgrees / examples.length,
      oracle_referrer_rank_median: referrerRanks.length > 0 ? median(referrerRanks) : null,
      rows: [...per].map(([cell, rs]) => ({
        cell,
        questions: rs.length,
        budget_median: median(rs.map((r) => r.budget)),
        recall: mean(rs.map((r) => r.recall)),
        coverage: mean(rs.map((r) => r.coverage)),
        referrer_value_recall: mean(rs.map((r) => r.referrerValueRecall ?? 0)),
        first_token_agrees: mean(rs.map((r) => (r.firstTokenAgrees ? 1 : 0))),
      })),
    };
  } finally {
    await probe.close();
  }
}

// ---------------------------------------------------------------------------
// Report

const cpu = cpus()[0]?.model ?? "unknown CPU";
const machine = `${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`;
const command = `npx bun scripts/bench-quality.ts ${process.argv.slice(2).join(" ")}`.trimEnd();
console.log(`machine: ${machine}`);
console.log(`command: ${command}`);
console.log(`model ${values.model}, CPU runner, ${threads} threads, cachecraft scores ${contextScores}, prophet span decay ${spanDecay}, prophet query rows ${queryRows}, prophet scores ${prophetScores}; ${questions} questions a cell, greedy, exact match, 95% Wilson intervals (%); retrieval ${retrievalBytes} bytes; seed base 0x${seedBase.toString(16)}; chunks stored by ${storePolicies.join(", ")} (warm-ups at ratio 0); --reuse-scoring ${reuseScoringModes.join(", ")}`);

const vsFullOf = (rows: readonly CellSummary[], s: CellSummary) => {
  const full = rows.find((r) => r.policy === "full" && r.kv_budget === null);
  return full && full.n > 0 && full.accuracy > 0 && s.n > 0 ? (s.accuracy / full.accuracy).toFixed(2) : "–";
};
const warmUpText = (w: ReturnType<WarmUpTally["summary"]>) =>
  `warm-ups stored ${w.chunks_stored} of ${w.documents} chunks (${w.partial} examples fewer than all, ${w.empty} none: not asked)${w.settle_ms_median === null ? "" : `, then waited ${w.settle_ms_median.toFixed(0)} ms (median) for the idle time to score them`}`;
const matrixShown = storeRuns.length > 1;

for (const mode of reuseScoringModes) {
  const runs = storeRuns.filter((r) => r.reuse_scoring === mode);
  for (const family of families) {
    const heading = runs[0]!.grid[family]!.find((s) => s.n > 0) ?? runs[0]!.grid[family]![0];
    console.log("");
    console.log(`### ${family} (mean prompt ${heading ? heading.mean_prompt_tokens.toFixed(0) : "?"} tokens)${matrixShown ? `, --reuse-scoring ${mode}` : ""}`);
    if (matrixShown) {
      // The headline: each cell's accuracy (× full) by the policy that stored the chunks.
      console.log("");
      console.log(`| cell | ${runs.map((r) => `stored by ${r.stored_by}`).join(" | ")} |`);
      console.log(`|---|${runs.map(() => "---|").join("")}`);
      for (const cell of runs[0]!.grid[family]!.filter((s) => s.kv_budget === null)) {
        const entries = runs.map((r) => {
          const rows = r.grid[family]!;
          const s = rows.find((x) => x.cell === cell.cell)!;
          return s.n === 0 ? "not asked" : `${pct(s.accuracy)} (${vsFullOf(rows, s)})`;
        });
        console.log(`| ${cell.cell} | ${entries.join(" | ")} |`);
      }
      console.log("");
      for (const r of runs) {
        const scoring = r.scoring === null ? "" : `; at the end of the run ${r.scoring.scored} shifts measured in the idle time, ${r.scoring.pending} waiting`;
        console.log(`- stored by ${r.stored_by}: ${warmUpText(r.warm_up[family]!)}; served as ${r.warm_up[family]!.served_policies.join(", ") || "–"}${mode === "sync" ? "" : scoring}`);
      }
    }
    console.log("");
    console.log(`| ${matrixShown ? "stored by | " : ""}cell | accuracy % [95% CI] | × full | stale-answer % | reuse missing | answers meeting unscored chunks | recomputed tokens (median) | TTFT ms (median) |`);
    console.log(`|${matrixShown ? "---|" : ""}---|---|---|---|---|---|---|---|`);
    for (const r of runs) {
      const rows = r.grid[family]!.filter((s) => s.kv_budget === null);
      const by = matrixShown ? `${r.stored_by} | ` : "";
      if (rows.every((s) => s.n === 0)) {
        console.log(`| ${by}every cell | not asked: ${warmUpText(r.warm_up[family]!)} | | | | | | |`);
        continue;
      }
      for (const s of rows) {
        console.log(`| ${by}${s.cell} | ${accuracyText(s)} | ${vsFullOf(rows, s)} | ${pct(s.stale_rate)} | ${s.reuse_missing ?? "–"} | ${s.unscored_answers} | ${s.recomputed_tokens_median} | ${s.ttft_ms_median.toFixed(1)} |`);
      }
    }
  }
}

const sparse = (grid.retrieval ?? []).filter((s) => s.policy === "full");
if (sparse.some((s) => s.kv_budget !== null)) {
  const dense = sparse.find((s) => s.kv_budget === null)!;
  console.log("");
  console.log(`### sparse decode on retrieval (${retrievalBytes} bytes), dense prefill`);
  console.log("");
  console.log("| KV budget | accuracy % [95% CI] | × dense | sparse decode steps |");
  console.log("|---|---|---|---|");
  for (const s of sparse) {
    const vs = dense.accuracy > 0 ? (s.accuracy / dense.accuracy).toFixed(2) : "–";
    console.log(`| ${s.kv_budget === null ? "dense" : `${100 * s.kv_budget}%`} | ${accuracyText(s)} | ${vs} | ${s.sparse_decode_steps} |`);
  }
}

if (orderVariants.length > 0) {
  console.log("");
  console.log("### order family: turn-2 documents in relevance order vs reordered with the priority annotation");
  console.log("");
  console.log(`| order | repeated documents | full % [95% CI] | prophet@${TTFT_RATIO} % [95% CI] |`);
  console.log("|---|---|---|---|");
  for (const v of orderVariants) {
    console.log(`| ${v.order} | ${v.dedup ? "dedup notes" : "repeated in full"} | ${accuracyText(v.cells[0]!)} | ${accuracyText(v.cells[1]!)} |`);
  }
}

// TTFT at 20% recompute against full prefill, on the family with the longest prompts.
let ttft: { family: string; full_ms: number; rows: { cell: string; ttft_ms: number; vs_full: number }[] } | null = null;
const longest = families.filter((f) => grid[f]!.some((s) => s.policy === "full" && s.kv_budget === null)).sort((a, b) => grid[b]![0]!.mean_prompt_tokens - grid[a]![0]!.mean_prompt_tokens)[0];
if (longest !== undefined) {
  const rows = grid[longest]!.filter((s) => s.kv_budget === null);
  const full = rows.find((s) => s.policy === "full")!;
  const at = rows.filter((s) => s.ratio === TTFT_RATIO || s.policy === "none" || s.policy === "prefix");
  ttft = { family: longest, full_ms: full.ttft_ms_median, rows: at.map((s) => ({ cell: s.cell, ttft_ms: s.ttft_ms_median, vs_full: s.ttft_ms_median / full.ttft_ms_median })) };
  console.log("");
  console.log(`### TTFT on ${longest} (mean prompt ${full.mean_prompt_tokens.toFixed(0)} tokens; target ≤ 0.35× full at ${100 * TTFT_RATIO}% recompute)`);
  console.log("");
  console.log("| cell | TTFT ms (median) | × full |");
  console.log("|---|---|---|");
  console.log(`| full | ${full.ttft_ms_median.toFixed(1)} | 1.00 |`);
  for (const r of ttft.rows) console.log(`| ${r.cell} | ${r.ttft_ms.toFixed(1)} | ${r.vs_full.toFixed(2)} |`);
}

if (recall !== null) {
  console.log("");
  console.log(`### which tokens the policies recompute vs the oracle (dependence, ${recall.questions} questions)`);
  console.log("");
  console.log(
    `Oracle: the reused tokens ranked by how far their KV (as \`none\` leaves it) is from full prefill's. The referrer's first "^" ranks ${recall.oracle_referrer_rank_median ?? "–"} (median) among them; \`none\`'s first answer token equals full's in ${pct(recall.none_first_token_agrees)}% of questions.`,
  );
  console.log("");
  console.log("| cell | tokens (median) | recall of the oracle's top tokens | deviation covered | referrer \"^^^\" chosen | first answer token = full's |");
  console.log("|---|---|---|---|---|---|");
  for (const r of recall.rows) console.log(`| ${r.cell} | ${r.budget_median} | ${pct(r.recall)}% | ${pct(r.coverage)}% | ${pct(r.referrer_value_recall)}% | ${pct(r.first_token_agrees)}% |`);
}

const storeMatrix = storeRuns.map((r) => ({ reuse_scoring: r.reuse_scoring, stored_by: r.stored_by, warm_up: r.warm_up, scoring: r.scoring, grid: r.grid }));
const result = { bench: "quality", machine, command, model: values.model, questions, store_policies: storePolicies, reuse_scoring: reuseScoringModes, store_matrix: storeMatrix, retrieval_bytes: retrievalBytes, seed_base: seedBase, threads, context_scores: contextScores, prophet_span_decay: spanDecay, prophet_query_rows: queryRows, prophet_scores: prophetScores, grid, order_variants: orderVariants, ttft, recall };
const line = JSON.stringify(result);
if (values.json) writeFileSync(values.json, `${JSON.stringify(result, null, 2)}\n`);
console.log("");
console.log(line);
