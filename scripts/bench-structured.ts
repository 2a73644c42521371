/**
 * Structured-outputs benchmark (issue 20, item 6): what a JSON-schema constraint costs the
 * built-in engine on the ~100M-parameter random-weight model.
 *
 *   npx bun scripts/bench-structured.ts [--threads 2] [--runs 5] [--max-tokens 128] [--batch 1,8]
 *                                       [--schemas 40] [--vocabs bpe,byte] [--json out.json]
 *
 * Vocabularies: `bpe` gives the model a byte-level BPE vocabulary filling its 16,384 ids
 * (benchBpeVocab.ts), as a real model has; `byte` keeps the byte tokenizer (259 tokens, the
 * other ids never allowed). For each:
 *   compile  the first constrained request (xgrammar loaded, the vocabulary read), then each of
 *            --schemas seeded random schemas (test/helpers/randomSchemas.ts) cold: the time
 *            GrammarCompiler.constraint takes on a cache miss (rewrite, conversion, compile,
 *            matcher). Median, p90, max.
 *   decode   one order-like schema (nested object, array of objects, enum, bounds, a nullable
 *            string), prompt "JSON:", temperature 1, seeds 0..B-1, --batch B sequences at once.
 *            Constrained, then free with the same seeds and max_tokens set to each constrained
 *            answer's length (eos ignored), so both make the same number of tokens; the order
 *            alternates between runs. A step's tokens arrive together, so the arrival times give
 *            every decode step's duration; decode tok/s = tokens a step (after each sequence's
 *            first; jump-forward appends forced tokens to a step) / the median step, over every
 *            step of --runs runs: robust to bursts of other work on a shared machine (the wall
 *            time of each run, median over runs, is printed beside it). Twice: as clients see it
 *            (jump-forward on), and with logprobs 0 on both sides, which turns jump-forward off
 *            (one sampled token a step: the mask's cost alone).
 *   mask     each constrained answer replayed through a fresh constraint: per sampled token, the
 *            bitmask (prepare + ready: xgrammar's next-token mask; in the engine this overlaps
 *            the runner's forward pass) and the apply (masked: the UTF-8 filter and the copy of
 *            the logits with forbidden tokens at -Infinity; on the critical path). Median, p90.
 *
 * Prints the machine, the command and markdown tables on stdout (progress on stderr).
 */
import { writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { parseArgs } from "node:util";
import { GenerationEngine } from "../src/engine/generationEngine.ts";
import type { GenerationRequest } from "../src/engine/generationTypes.ts";
import type { GrammarSpec } from "../src/engine/grammarSpec.ts";
import { randomSchema } from "../test/helpers/randomSchemas.ts";
import { bpeModelFolder } from "./benchBpeVocab.ts";
import { benchModelFolder, buildBenchRunner, median, percentile, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    threads: { type: "string", default: String(cpus().length) },
    runs: { type: "string", default: "5" },
    "max-tokens": { type: "string", default: "128" },
    batch: { type: "string", default: "1,8" },
    schemas: { type: "string", default: "40" },
    vocabs: { type: "string", default: "bpe,byte" },
    json: { type: "string" },
  },
});
const threads = Number(values.threads);
const runs = Number(values.runs);
const maxTokens = Number(values["max-tokens"]);
const batches = values.batch!.split(",").map(Number);
const schemaCount = Number(values.schemas);
const vocabs = values.vocabs!.split(",");
for (const vocab of vocabs) if (vocab !== "bpe" && vocab !== "byte") throw new Error(`--vocabs: bpe or byte, got ${vocab}`);

const ORDER = {
  type: "object",
  properties: {
    id: { type: "integer", minimum: 1, maximum: 1_000_000 },
    customer: {
      type: "object",
      properties: { name: { type: "string", maxLength: 24 }, email: { type: "string", maxLength: 32 }, vip: { type: "boolean" } },
      required: ["name", "email", "vip"],
      additionalProperties: false,
    },
    items: {
      type: "array",
      items: {
        type: "object",
        properties: { sku: { type: "string", maxLength: 12 }, quantity: { type: "integer", minimum: 1, maximum: 99 }, price: { type: "number", minimum: 0, maximum: 10000 } },
        required: ["sku", "quantity", "price"],
        additionalProperties: false,
      },
      minItems: 1,
      maxItems: 8,
    },
    status: { enum: ["pending", "paid", "shipped", "cancelled"] },
    note: { type: ["string", "null"], maxLength: 40 },
  },
  required: ["id", "customer", "items", "status", "note"],
  additionalProperties: false,
};
const jsonSchema = (schema: Record<string, unknown>): { spec: GrammarSpec; field: string } => ({ spec: { kind: "json_schema", schema }, field: "response_format" });

interface CompileFigures {
  first_use_ms: number;
  median_ms: number;
  p90_ms: number;
  max_ms: number;
  schemas: number;
}

async function compileFigures(engine: GenerationEngine): Promise<CompileFigures> {
  let started = performance.now();
  (await engine.grammar.constraint({ spec: { kind: "json" }, field: "response_format" })).dispose();
  const firstUse = performance.now() - started;
  const times: number[] = [];
  for (let i = 0; i < schemaCount; i++) {
    started = performance.now();
    (await engine.grammar.constraint(jsonSchema(randomSchema(7, i)))).dispose();
    times.push(performance.now() - started);
  }
  return { first_use_ms: firstUse, median_ms: median(times), p90_ms: percentile(times, 0.9), max_ms: Math.max(...times), schemas: times.length };
}

interface DecodeRun {
  tokens: number[][];
  decodeTokens: number;
  seconds: number;
  /** Each decode step's duration, ms: the gaps between the moments tokens arrive (a step's tokens arrive together). */
  steps: number[];
}

/** Runs the requests together, noting when every token arrives. */
async function decodeRun(engine: GenerationEngine, requests: GenerationRequest[], ignoreEos: boolean): Promise<DecodeRun> {
  const arrivals: number[] = [];
  const tokens = await Promise.all(
    requests.map(async (request) => {
      const ids: number[] = [];
      for await (const event of engine.generate({ ...request, ignoreEos })) {
        if (event.type !== "delta") continue;
        arrivals.push(performance.now());
        ids.push(...event.tokens.map((token) => token.id));
      }
      return ids;
    }),
  );
  arrivals.sort((a, b) => a - b);
  const stepStarts = arrivals.filter((t, i) => i === 0 || t - arrivals[i - 1]! > STEP_GAP_MS);
  const steps = stepStarts.slice(1).map((t, i) => t - stepStarts[i]!);
  return { tokens, decodeTokens: tokens.reduce((sum, ids) => sum + ids.length - 1, 0), seconds: (arrivals.at(-1)! - arrivals[0]!) / 1000, steps };
}

/** Tokens less than this apart came from one step (a 100M-parameter step takes 5 ms or more). */
const STEP_GAP_MS = 1;

interface PairFigures {
  tokens: number;
  /** Decode tokens a step (jump-forward makes it more than the batch). */
  constrained_tokens_per_step: number;
  free_tokens_per_step: number;
  /** Median step duration over every step of every run (robust to other work on a shared machine). */
  constrained_step_ms: number;
  free_step_ms: number;
  /** Tokens a step / median step. */
  constrained_tok_s: number;
  free_tok_s: number;
  ratio: number;
  /** Tokens over the wall time of each run, median over runs (for reference: noisier). */
  constrained_wall_tok_s: number;
  free_wall_tok_s: number;
  finished: number;
}

interface DecodeFigures {
  batch: number;
  /** As clients see it: jump-forward on. */
  jump: PairFigures;
  /** The mask's cost alone: logprobs 0 on both sides (no jump-forward; one sampled token a step). */
  stepwise: PairFigures;
}

const wallRate = (rs: DecodeRun[]) => median(rs.map((r) => r.decodeTokens / r.seconds));
const stepMs = (rs: DecodeRun[]) => median(rs.flatMap((r) => r.steps));
const perStep = (rs: DecodeRun[]) => rs.reduce((sum, r) => sum + r.decodeTokens, 0) / rs.reduce((sum, r) => sum + r.steps.length, 0);

/**
 * Constrained and free decoding of the same seeds and lengths, interleaved (the order alternates
 * between runs); `logprobs` 0 turns jump-forward off, on both sides alike.
 */
async function decodePair(engine: GenerationEngine, batch: number, logprobs: number | null): Promise<{ figures: PairFigures; answers: number[][] }> {
  const promptIds = engine.completionPromptIds("JSON:");
  const sampling = (seed: number) => ({ temperature: 1, topP: 1, topK: 0, seed });
  const constrained = async () =>
    decodeRun(
      engine,
      await Promise.all(Array.from({ length: batch }, async (_, seed) => ({ promptIds, maxTokens, sampling: sampling(seed), logprobs, constraint: await engine.grammar.constraint(jsonSchema(ORDER)) }))),
      false,
    );
  // Warm-up: compiles the schema, fills the prefix cache, fixes each seed's answer length.
  const warm = await constrained();
  const lengths = warm.tokens.map((ids) => ids.length);
  const finished = warm.tokens.filter((ids) => engine.tokenizer.eosTokenIds.includes(ids.at(-1)!)).length;
  const free = () => decodeRun(engine, lengths.map((length, seed) => ({ promptIds, maxTokens: length, sampling: sampling(seed), logprobs })), true);
  const c: DecodeRun[] = [];
  const f: DecodeRun[] = [];
  for (let run = 0; run < runs; run++) {
    if (run % 2 === 0) {
      c.push(await constrained());
      f.push(await free());
    } else {
      f.push(await free());
      c.push(await constrained());
    }
    progress(`  batch ${batch}${logprobs === null ? "" : ", no jump-forward"}, run ${run + 1}/${runs}: median step constrained ${median(c.at(-1)!.steps).toFixed(2)} ms, free ${median(f.at(-1)!.steps).toFixed(2)} ms`);
  }
  const tokS = (rs: DecodeRun[]) => (1000 * perStep(rs)) / stepMs(rs);
  return {
    figures: {
      tokens: lengths.reduce((a, b) => a + b, 0),
      constrained_tokens_per_step: perStep(c),
      free_tokens_per_step: perStep(f),
      constrained_step_ms: stepMs(c),
      free_step_ms: stepMs(f),
      constrained_tok_s: tokS(c),
      free_tok_s: tokS(f),
      ratio: tokS(c) / tokS(f),
      constrained_wall_tok_s: wallRate(c),
      free_wall_tok_s: wallRate(f),
      finished,
    },
    answers: warm.tokens,
  };
}

interface MaskFigures {
  sampled_tokens: number;
  forced_tokens: number;
  bitmask_us_median: number;
  bitmask_us_p90: number;
  apply_us_median: number;
  apply_us_p90: number;
}

/** Replays the answers through fresh constraints, timing the mask of every sampled token. */
async function maskFigures(engine: GenerationEngine, answers: number[][]): Promise<MaskFigures> {
  const logits = Float32Array.from({ length: engine.info.vocab }, (_, i) => Math.sin(i));
  const bitmask: number[] = [];
  const apply: number[] = [];
  let forcedTokens = 0;
  for (const ids of answers) {
    const constraint = await engine.grammar.constraint(jsonSchema(ORDER));
    for (let at = 0; at < ids.length && !constraint.terminated; ) {
      const started = performance.now();
      constraint.prepare();
      await constraint.ready();
      const ready = performance.now();
      constraint.masked(logits);
      apply.push((performance.now() - ready) * 1000);
      bitmask.push((ready - started) * 1000);
      constraint.accept(ids[at++]!);
      const forced = await constraint.jumpForward(ids.length - at);
      for (const id of forced) if (ids[at++] !== id) throw new Error("the replay's jump-forward differs from the engine's");
      forcedTokens += forced.length;
    }
    constraint.dispose();
  }
  return {
    sampled_tokens: bitmask.length,
    forced_tokens: forcedTokens,
    bitmask_us_median: median(bitmask),
    bitmask_us_p90: percentile(bitmask, 0.9),
    apply_us_median: median(apply),
    apply_us_p90: percentile(apply, 0.9),
  };
}

const runner = buildBenchRunner("cpu");
const results: { vocab: string; compile: CompileFigures; decode: DecodeFigures[]; mask: MaskFigures }[] = [];
for (const vocab of vocabs) {
  const model = vocab === "bpe" ? bpeModelFolder("100m") : benchModelFolder("100m");
  progress(`${vocab}: opening ${model} ...`);
  const engine = await GenerationEngine.open({ model, runner, kvBlocks: 512, threads });
  try {
    const compile = await compileFigures(engine);
    progress(`${vocab}: compile median ${compile.median_ms.toFixed(1)} ms`);
    const decode: DecodeFigures[] = [];
    let answers: number[][] = [];
    for (const batch of batches) {
      const jump = await decodePair(engine, batch, null);
      const stepwise = await decodePair(engine, batch, 0);
      decode.push({ batch, jump: jump.figures, stepwise: stepwise.figures });
      answers = answers.concat(jump.answers);
    }
    results.push({ vocab, compile, decode, mask: await maskFigures(engine, answers) });
  } finally {
    await engine.close();
  }
}

const cpu = cpus()[0]?.model ?? "unknown CPU";
console.log(`machine: ${cpu}, ${cpus().length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, load ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
console.log(`command: npx bun scripts/bench-structured.ts ${process.argv.slice(2).join(" ")}`.trimEnd());
console.log(`100m model (100.7M parameters, f32), ${threads} runner threads, ${runs} runs (medians), max_tokens ${maxTokens}`);
console.log("");
console.log("| vocabulary | batch | jump-forward | tokens | tokens a step (constrained / free) | median ms a step (constrained / free) | constrained tok/s | free tok/s | ratio | wall tok/s, median of runs (constrained / free) | finished by the grammar |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of results) {
  for (const d of r.decode) {
    for (const [jump, p] of [["on", d.jump], ["off (logprobs 0)", d.stepwise]] as const) {
      console.log(
        `| ${r.vocab} | ${d.batch} | ${jump} | ${p.tokens} | ${p.constrained_tokens_per_step.toFixed(2)} / ${p.free_tokens_per_step.toFixed(2)} | ${p.constrained_step_ms.toFixed(2)} / ${p.free_step_ms.toFixed(2)} | ${p.constrained_tok_s.toFixed(1)} | ${p.free_tok_s.toFixed(1)} | ${(100 * p.ratio).toFixed(1)}% | ${p.constrained_wall_tok_s.toFixed(1)} / ${p.free_wall_tok_s.toFixed(1)} | ${p.finished} of ${d.batch} |`,
      );
    }
  }
}
console.log("");
console.log("| vocabulary | sampled tokens (forced) | bitmask µs median / p90 | apply µs median / p90 |");
console.log("|---|---|---|---|");
for (const r of results) console.log(`| ${r.vocab} | ${r.mask.sampled_tokens} (${r.mask.forced_tokens}) | ${r.mask.bitmask_us_median.toFixed(0)} / ${r.mask.bitmask_us_p90.toFixed(0)} | ${r.mask.apply_us_median.toFixed(0)} / ${r.mask.apply_us_p90.toFixed(0)} |`);
console.log("");
console.log("| vocabulary | first use ms | schemas | cold compile ms median / p90 / max |");
console.log("|---|---|---|---|");
for (const r of results) console.log(`| ${r.vocab} | ${r.compile.first_use_ms.toFixed(0)} | ${r.compile.schemas} | ${r.compile.median_ms.toFixed(1)} / ${r.compile.p90_ms.toFixed(1)} / ${r.compile.max_ms.toFixed(1)} |`);
if (values.json) writeFileSync(values.json, JSON.stringify({ threads, runs, maxTokens, results }, null, 2));
