/**
 * Does the live audit's agreement predict the accuracy that reuse loses? (issue 31, item 7.)
 * In-process engine on models/quality behind the real HTTP server, the audit at rate 1.
 *
 *   npx bun scripts/bench-audit-agreement.ts [--model models/quality] [--questions 100]
 *        [--families dependence] [--cells none,cachecraft@0.02,...] [--tokens 8] [--threads 2] [--json FILE]
 *
 * Per example (src/quality/qualityClient.ts): the warm-up stores every chunk after other
 * neighbours (cachecraft at ratio 0); the engine is let idle, so every variant's shift is measured;
 * the question is asked under full prefill (the reference answer), then under each cell. After each
 * reusing answer the engine is let idle again, so the audit of that very request (rate 1: every
 * eligible request) has run: its AgreementSample (first-token top-1 and KL, greedy-token
 * agreement over --tokens tokens) is paired with the answer.
 *
 * Per cell: exact match and its ratio to full's, the share of answers that differ from full's
 * answer, and the audit's mean agreement, top-1 share and mean KL. Then Pearson's r across cells
 * (mean agreement against accuracy × full, and against the share of answers equal to full's), and
 * across questions (a question's agreement against whether its answer equals full's). Markdown on
 * stdout; the last line is the result as JSON (also --json FILE).
 */
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { parseArgs } from "node:util";
import { GenerationEngine } from "../src/engine/generationEngine.ts";
import { ContextService } from "../src/online/contextService.ts";
import { startServer } from "../src/server/serve.ts";
import { QualityClient, cellLabel, type QualityCell, type QualityPolicy } from "../src/quality/qualityClient.ts";
import { exampleSeed } from "../src/quality/qualityRandom.ts";
import { QUALITY_FAMILIES, qualityExample, type QualityFamily } from "../src/quality/qualityTasks.ts";
import { pearson } from "../src/quality/correlation.ts";
import type { AgreementSample } from "../src/quality/answerAgreement.ts";
import { findRunner } from "../src/runner/runnerExecutable.ts";
import { progress } from "./benchKit.ts";

const DEFAULT_CELLS = "none,cachecraft@0.02,cachecraft@0.05,cachecraft@0.1,cachecraft@0.2,prophet@0.02,prophet@0.05,prophet@0.1,prophet@0.2,epic@0.05,epic@0.2";
const { values } = parseArgs({
  options: {
    model: { type: "string", default: "models/quality" },
    questions: { type: "string", default: "100" },
    families: { type: "string", default: "dependence" },
    cells: { type: "string", default: DEFAULT_CELLS },
    tokens: { type: "string", default: "8" },
    threads: { type: "string", default: "2" },
    json: { type: "string" },
  },
});
const questions = Number(values.questions);
const tokens = Number(values.tokens);
const threads = Number(values.threads);
for (const [name, value] of [["questions", questions], ["tokens", tokens], ["threads", threads]] as const) {
  if (!(Number.isSafeInteger(value) && value >= 1)) throw new Error(`--${name} must be a positive integer`);
}
const families = values.families!.split(",") as QualityFamily[];
for (const f of families) if (!QUALITY_FAMILIES.includes(f)) throw new Error(`--families: unknown family '${f}' (${QUALITY_FAMILIES.join(", ")})`);
const cells: QualityCell[] = values.cells!.split(",").map((text) => {
  const [policy, ratio] = text.split("@") as [QualityPolicy, string | undefined];
  if (!["none", "cachecraft", "prophet", "epic"].includes(policy)) throw new Error(`--cells: '${text}' is not a reusing policy (none, cachecraft@R, prophet@R, epic@R)`);
  if (policy === "none") return { policy };
  const r = Number(ratio);
  if (ratio === undefined || !(r >= 0 && r <= 1)) throw new Error(`--cells: '${text}' needs a ratio from 0 to 1 (e.g. ${policy}@0.2)`);
  return { policy, ratio: r };
});

interface Pair {
  family: QualityFamily;
  cell: string;
  correct: boolean;
  sameAsFull: boolean;
  sample: AgreementSample | null;
}

const runner = await findRunner("cpu", { log: () => {} });
const service = await ContextService.open({ dataDir: null });
const engine = await GenerationEngine.open({ model: values.model!, runner, threads, prefixCache: false, reuseAuditRate: 1, reuseAuditTokens: tokens });
const server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
const samples: AgreementSample[] = [];
engine.scheduler.reuseAudit.onSample((sample) => samples.push(sample));
const pairs: Pair[] = [];
const fullCorrect = new Map<QualityFamily, number>();
const started = performance.now();
try {
  const client = new QualityClient(server.url);
  for (const [f, family] of families.entries()) {
    let correctFull = 0;
    for (let i = 0; i < questions; i++) {
      const example = qualityExample(family, exampleSeed(0xa6e0000 + f, i));
      await client.warmUp(example);
      await engine.scheduler.background.idle();
      const full = await client.ask(example, { policy: "full" });
      if (full.correct) correctFull++;
      for (const cell of cells) {
        const seen = samples.length;
        const answer = await client.ask(example, cell);
        await engine.scheduler.background.idle();
        const sample = samples.length > seen ? samples[samples.length - 1]! : null;
        pairs.push({ family, cell: cellLabel(cell), correct: answer.correct, sameAsFull: answer.text === full.text, sample });
      }
      if ((i + 1) % 10 === 0) progress(`${family}: ${i + 1}/${questions}, ${((performance.now() - started) / 1000).toFixed(0)} s`);
    }
    fullCorrect.set(family, correctFull);
  }
} finally {
  await server.stop(1000);
  await engine.close();
  await service.close();
}

const mean = (xs: readonly number[]) => (xs.length === 0 ? NaN : xs.reduce((a, b) => a + b, 0) / xs.length);
const rows = families.flatMap((family) =>
  cells.map((cell) => {
    const label = cellLabel(cell);
    const mine = pairs.filter((p) => p.family === family && p.cell === label);
    const audited = mine.flatMap((p) => (p.sample === null ? [] : [p.sample]));
    const accuracy = mine.filter((p) => p.correct).length / mine.length;
    const full = fullCorrect.get(family)! / questions;
    return {
      family,
      cell: label,
      accuracy,
      vs_full: full > 0 ? accuracy / full : NaN,
      same_as_full: mine.filter((p) => p.sameAsFull).length / mine.length,
      audited: audited.length,
      agreement: mean(audited.map((s) => s.agreement)),
      top1: mean(audited.map((s) => (s.topOneAgrees ? 1 : 0))),
      kl: mean(audited.map((s) => s.klDivergence)),
    };
  }),
);
const withSamples = rows.filter((r) => r.audited > 0);
const questionPairs = pairs.filter((p) => p.sample !== null);
const correlation = {
  cells_agreement_vs_accuracy: pearson(withSamples.map((r) => r.agreement), withSamples.map((r) => r.vs_full)),
  cells_agreement_vs_same_answer: pearson(withSamples.map((r) => r.agreement), withSamples.map((r) => r.same_as_full)),
  cells_kl_vs_accuracy: pearson(withSamples.map((r) => r.kl), withSamples.map((r) => r.vs_full)),
  questions_agreement_vs_same_answer: pearson(questionPairs.map((p) => p.sample!.agreement), questionPairs.map((p) => (p.sameAsFull ? 1 : 0))),
  questions_top1_vs_same_answer: pearson(questionPairs.map((p) => (p.sample!.topOneAgrees ? 1 : 0)), questionPairs.map((p) => (p.sameAsFull ? 1 : 0))),
};

const pct = (x: number) => (100 * x).toFixed(1);
const r = (x: number | null) => (x === null ? "n/a" : x.toFixed(3));
console.log(`machine: ${cpus()[0]?.model ?? "?"}, ${cpus().length} cores, load ${loadavg()[0]!.toFixed(1)}; model ${values.model}; ${questions} questions a family; audit rate 1, ${tokens} tokens`);
console.log(`command: npx bun scripts/bench-audit-agreement.ts ${process.argv.slice(2).join(" ")}`);
console.log("\n| family | cell | exact match % | × full | answers = full's % | audited | agreement | top-1 % | KL (nats) |");
console.log("|---|---|---|---|---|---|---|---|---|");
for (const family of families) console.log(`| ${family} | full | ${pct(fullCorrect.get(family)! / questions)} | 1.00 | 100 | - | - | - | - |`);
for (const row of rows) {
  console.log(`| ${row.family} | ${row.cell} | ${pct(row.accuracy)} | ${row.vs_full.toFixed(2)} | ${pct(row.same_as_full)} | ${row.audited} | ${row.agreement.toFixed(3)} | ${pct(row.top1)} | ${row.kl.toFixed(3)} |`);
}
console.log(`\nPearson r across cells (${withSamples.length}): agreement vs accuracy × full ${r(correlation.cells_agreement_vs_accuracy)}; agreement vs answers = full's ${r(correlation.cells_agreement_vs_same_answer)}; KL vs accuracy × full ${r(correlation.cells_kl_vs_accuracy)}`);
console.log(`Pearson r across audited answers (${questionPairs.length}): agreement vs answer = full's ${r(correlation.questions_agreement_vs_same_answer)}; first-token top-1 vs answer = full's ${r(correlation.questions_top1_vs_same_answer)}`);
const result = { questions, tokens, families, rows, correlation, full: Object.fromEntries(fullCorrect) };
if (values.json) writeFileSync(values.json, JSON.stringify(result, null, 2));
console.log(JSON.stringify(result));
