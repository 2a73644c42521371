/**
 * Writes a `ctxr reuse calibrate` request file (docs/reuse-target.md) from the quality tasks of
 * models/quality (src/quality/qualityTasks.ts): one line per example, its documents, its
 * question, and the warm-up order the quality benchmark stores them in first (dependence: the
 * referrer after another record; the others: a seeded shuffle).
 *
 *   npx bun scripts/calibration-requests.ts [--family dependence] [--count 20] [--seed 0xBE4C0000] > requests.jsonl
 *
 * Example i is the quality benchmark's: exampleSeed(seed + index of the family, i).
 */
import { parseArgs } from "node:util";
import { warmupOrder } from "../src/quality/qualityClient.ts";
import { exampleSeed } from "../src/quality/qualityRandom.ts";
import { QUALITY_FAMILIES, qualityExample, type QualityFamily } from "../src/quality/qualityTasks.ts";

const { values } = parseArgs({
  options: {
    family: { type: "string", default: "dependence" },
    count: { type: "string", default: "20" },
    seed: { type: "string", default: "0xBE4C0000" },
  },
});
const family = values.family as QualityFamily;
if (!QUALITY_FAMILIES.includes(family)) throw new Error(`--family must be one of ${QUALITY_FAMILIES.join(", ")}, got '${values.family}'`);
const count = Number(values.count);
if (!(Number.isInteger(count) && count >= 1)) throw new Error(`--count must be a positive integer, got '${values.count}'`);
const set = (Number(values.seed) + QUALITY_FAMILIES.indexOf(family)) >>> 0;

for (let i = 0; i < count; i++) {
  const example = qualityExample(family, exampleSeed(set, i));
  process.stdout.write(JSON.stringify({ documents: example.documents, question: example.question, warmup_order: warmupOrder(example) }) + "\n");
}
