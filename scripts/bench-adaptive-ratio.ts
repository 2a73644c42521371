/**
 * The adaptive recompute ratio's convergence on real answers (issue 31, item 5): the
 * --reuse-target-agreement controller (src/kv/adaptiveRecomputeRatio.ts), started at a ratio,
 * serves quality examples one after another at its current ratio, in-process on the CPU runner
 * (src/quality/reuseCalibration.ts: warm-up in another order, full prefill, the policy at the
 * ratio, greedy agreement over --tokens tokens), and takes each request's agreement as its
 * audit sample (every request audited). Beside it, the same examples at fixed ratios: the
 * smallest fixed ratio whose mean agreement meets the target, which the controller should settle
 * within 0.05 of.
 *
 *   nice -n 10 npx bun scripts/bench-adaptive-ratio.ts [--model models/quality] [--family dependence]
 *     [--policy prophet] [--target 0.9] [--start 0.05] [--requests 600] [--tokens 4] [--threads 1] [--json FILE]
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { AdaptiveRecomputeRatios } from "../src/kv/adaptiveRecomputeRatio.ts";
import type { RecomputePolicy } from "../src/kv/recomputeSelection.ts";
import { resolveModelSource } from "../src/model/modelSource.ts";
import { loadSourceTokenizer } from "../src/model/sourceTokenizer.ts";
import { findRunner } from "../src/runner/runnerExecutable.ts";
import type { CalibrationRequest } from "../src/quality/calibrationRequests.ts";
import { warmupOrder } from "../src/quality/qualityClient.ts";
import { exampleSeed } from "../src/quality/qualityRandom.ts";
import { QUALITY_FAMILIES, qualityExample, type QualityFamily } from "../src/quality/qualityTasks.ts";
import { calibrationPrompt, ReuseCalibration } from "../src/quality/reuseCalibration.ts";

const { values } = parseArgs({
  options: {
    model: { type: "string", default: "models/quality" },
    family: { type: "string", default: "dependence" },
    policy: { type: "string", default: "prophet" },
    target: { type: "string", default: "0.9" },
    start: { type: "string", default: "0.05" },
    requests: { type: "string", default: "600" },
    tokens: { type: "string", default: "4" },
    threads: { type: "string", default: "1" },
    "fixed-ratios": { type: "string", default: "0.05,0.1,0.15,0.2,0.25,0.3,0.4,0.6" },
    "fixed-requests": { type: "string", default: "200" },
    seed: { type: "string", default: "0xBE4C0000" },
    json: { type: "string" },
  },
});
const family = values.family as QualityFamily;
const policy = values.policy as RecomputePolicy;
const target = Number(values.target);
const count = Number(values.requests);
const tokens = Number(values.tokens);
const set = (Number(values.seed) + QUALITY_FAMILIES.indexOf(family)) >>> 0;

const source = resolveModelSource(values.model!);
const { tokenizer, addBos } = await loadSourceTokenizer(source);
const prompts = (n: number, offset: number) =>
  Array.from({ length: n }, (_, i) => {
    const example = qualityExample(family, exampleSeed(set, offset + i));
    const request: CalibrationRequest = { line: i + 1, documents: example.documents, question: example.question, warmupOrder: warmupOrder(example) };
    return { warmup: calibrationPrompt(tokenizer, addBos, request, request.warmupOrder), measured: calibrationPrompt(tokenizer, addBos, request, request.documents.map((_, d) => d)) };
  });
const served = prompts(count, 0);
const fixedSet = prompts(Number(values["fixed-requests"]), 100_000);
const calibration = await ReuseCalibration.open({
  executable: await findRunner("cpu"),
  model: source.path,
  blocks: Math.max(...[...served, ...fixedSet].map((p) => ReuseCalibration.blocksFor(p.measured, tokens))),
  threads: Number(values.threads),
  stopIds: tokenizer.eosTokenIds,
});

const started = performance.now();
// Fixed ratios on their own examples: the smallest meeting the target.
const fixedRatios = values["fixed-ratios"]!.split(",").map(Number);
const fixedAgreement = new Map<number, number>();
const cells = fixedRatios.map((ratio) => ({ policy, ratio }));
const sums = fixedRatios.map(() => 0);
for (const p of fixedSet) (await calibration.measure(p.warmup, p.measured, cells, tokens)).forEach((o, c) => (sums[c]! += o.agreement));
fixedRatios.forEach((ratio, c) => fixedAgreement.set(ratio, sums[c]! / fixedSet.length));
const smallestFixed = fixedRatios.find((ratio) => fixedAgreement.get(ratio)! >= target) ?? null;

const ratios = new AdaptiveRecomputeRatios({ target, minRatio: 0.05, maxRatio: 0.6, initialRatio: Number(values.start) });
const trajectory: { ratio: number; agreement: number }[] = [];
for (const p of served) {
  const ratio = ratios.ratioFor("model", policy);
  const [outcome] = await calibration.measure(p.warmup, p.measured, [{ policy, ratio }], tokens);
  trajectory.push({ ratio, agreement: outcome!.agreement });
  ratios.observe({ model: "model", policy, ratio, agreement: outcome!.agreement });
}
await calibration.close();
const seconds = (performance.now() - started) / 1000;

const settled = trajectory.slice(Math.floor(trajectory.length / 2));
const median = [...settled.map((t) => t.ratio)].sort((a, b) => a - b)[settled.length >> 1]!;
const servedAgreement = settled.reduce((s, t) => s + t.agreement, 0) / settled.length;
const firstMeeting = smallestFixed === null ? -1 : trajectory.findIndex((t) => t.ratio >= smallestFixed - 0.05);
const cell = ratios.cellStats[0]!;

console.log(`model ${values.model}, family ${family}, policy ${policy}, target ${target}, start ${values.start}, ${count} requests each audited, ${tokens} greedy tokens; ${seconds.toFixed(1)} s`);
console.log(`fixed ratios (${fixedSet.length} other examples): ${fixedRatios.map((r) => `${r}: ${(100 * fixedAgreement.get(r)!).toFixed(1)}%`).join(", ")}`);
console.log(`smallest fixed ratio meeting ${target}: ${smallestFixed ?? "none"}`);
console.log(`ratio every 25 requests: ${trajectory.filter((_, i) => i % 25 === 0).map((t) => t.ratio.toFixed(3)).join(" ")}`);
console.log(`within 0.05 of the smallest fixed ratio from request ${firstMeeting}; second half: median ratio ${median.toFixed(3)}, range ${Math.min(...settled.map((t) => t.ratio)).toFixed(3)}-${Math.max(...settled.map((t) => t.ratio)).toFixed(3)}, mean agreement ${(100 * servedAgreement).toFixed(1)}%; moves up ${cell.movesUp}, down ${cell.movesDown}`);
if (values.json !== undefined) {
  writeFileSync(values.json, JSON.stringify({ bench: "adaptive-ratio", model: values.model, family, policy, target, start: Number(values.start), requests: count, tokens, fixed: Object.fromEntries(fixedAgreement), smallest_fixed: smallestFixed, median_settled_ratio: median, served_agreement: servedAgreement, first_within: firstMeeting, moves_up: cell.movesUp, moves_down: cell.movesDown, trajectory }, null, 1) + "\n");
}
