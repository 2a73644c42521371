/**
 * Perplexity of one or more models through the CPU runner (issue 14, item 4), each against the
 * first: a model folder and its GGUF files made with `ctxr model quantize`, for example.
 *
 *   npx bun scripts/perplexity.ts --model models/quality --model q8.gguf [--model q4k.gguf ...]
 *       [--text FILE] [--window 512] [--count 50] [--retrieval-count 50] [--retrieval-bytes 2048]
 *       [--threads 2] [--runner cuda/build/ctxr-runner-cpu] [--json FILE]
 *
 * Without --text the text is the quality model's task text: the held-out evaluation examples of
 * scripts/train-quality-model.py (src/quality/perplexity.ts, heldOutExamples), --count per
 * family and --retrieval-count of retrieval, each `<s> prompt answer "\n"` prefilled whole (in
 * chunks of --window tokens, KV kept). With --text FILE: the file's tokens in windows of
 * --window tokens (BOS first where the model adds it), each window scored on its own.
 *
 * Every token after a document's first is scored: mean NLL (nats) and perplexity exp(mean NLL);
 * answer tokens (task text only) apart, with the share that is the argmax and the examples whose
 * every answer token is (teacher-forced exact match). Prints a markdown table with each model's
 * perplexity relative to the first model's; the last stdout line is JSON (also --json FILE).
 */
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { resolveModelSource } from "../src/model/modelSource.ts";
import { loadSourceTokenizer } from "../src/model/sourceTokenizer.ts";
import { exampleDocument, heldOutExamples, perplexity, textWindows, type PerplexityDocument, type PerplexityResult } from "../src/quality/perplexity.ts";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";

const REPO = resolve(import.meta.dir, "..");
const { values } = parseArgs({
  options: {
    model: { type: "string", multiple: true },
    text: { type: "string" },
    window: { type: "string", default: "512" },
    count: { type: "string", default: "50" },
    "retrieval-count": { type: "string" },
    "retrieval-bytes": { type: "string", default: "2048" },
    threads: { type: "string", default: "2" },
    runner: { type: "string", default: join(REPO, "cuda", "build", "ctxr-runner-cpu") },
    json: { type: "string" },
  },
});
const models = values.model ?? [];
if (models.length === 0) {
  console.error("usage: perplexity.ts --model DIR|FILE.gguf [--model ...] [--text FILE] [--window 512] [--count 50]");
  process.exit(2);
}
const window = Number(values.window);
const count = Number(values.count);
const retrievalCount = values["retrieval-count"] === undefined ? count : Number(values["retrieval-count"]);
const retrievalBytes = Number(values["retrieval-bytes"]);
const text = values.text === undefined ? null : await Bun.file(values.text).text();

interface ModelRow {
  model: string;
  weightDtype: string;
  documents: number;
  seconds: number;
  result: PerplexityResult;
}

const rows: ModelRow[] = [];
for (const model of models) {
  const source = resolveModelSource(model);
  const { tokenizer, addBos } = await loadSourceTokenizer(source);
  const documents: PerplexityDocument[] =
    text === null ? heldOutExamples(count, retrievalCount, retrievalBytes).map((example) => exampleDocument(tokenizer, addBos, example)) : textWindows(tokenizer, addBos, text, window);
  const longest = Math.max(...documents.map((d) => d.ids.length));
  const runner = await RunnerProcess.start({ executable: values.runner!, model: source.path, blocks: Math.ceil(longest / 16) + 1, blockSize: 16, threads: Number(values.threads) });
  const started = performance.now();
  try {
    const result = await perplexity(runner, documents, { chunk: window, onDocument: (done, total) => done % 50 === 0 && console.error(`${model}: ${done}/${total} documents`) });
    rows.push({ model, weightDtype: runner.info.weight_dtype, documents: documents.length, seconds: (performance.now() - started) / 1000, result });
  } finally {
    await runner.shutdown();
  }
}

const base = rows[0]!.result;
const pct = (x: number, y: number) => `${(100 * (x / y - 1)).toFixed(3)}%`;
console.log(`text: ${text === null ? `quality task, held-out (${count} a family, ${retrievalCount} retrieval at ${retrievalBytes} bytes)` : values.text}; ${base.tokens} tokens scored, ${base.documents} documents`);
console.log("");
console.log("| model | runner weights | mean NLL | perplexity | vs first | answer NLL | answer ppl | vs first | answer top-1 | exact answers |");
console.log("|---|---|---|---|---|---|---|---|---|---|");
for (const row of rows) {
  const r = row.result;
  console.log(
    `| ${row.model} | ${row.weightDtype} | ${r.meanNll.toFixed(5)} | ${r.perplexity.toFixed(4)} | ${pct(r.perplexity, base.perplexity)} | ` +
      `${r.answerTokens > 0 ? r.answerMeanNll.toFixed(5) : "-"} | ${r.answerTokens > 0 ? r.answerPerplexity.toFixed(5) : "-"} | ${r.answerTokens > 0 ? pct(r.answerPerplexity, base.answerPerplexity) : "-"} | ` +
      `${r.answerTokens > 0 ? `${r.answerTop1}/${r.answerTokens}` : "-"} | ${r.answers > 0 ? `${r.exactAnswers}/${r.answers}` : "-"} |`,
  );
}
if (text === null) {
  console.log("");
  console.log("per family, perplexity (all tokens):");
  for (const row of rows) console.log(`  ${row.model}: ${Object.entries(row.result.groups).map(([name, g]) => `${name} ${g.perplexity.toFixed(4)} (${g.exactAnswers}/${g.answers} exact)`).join(", ")}`);
}
const json = JSON.stringify({ text: values.text ?? "quality-held-out", count, retrievalCount, retrievalBytes, window, rows });
if (values.json) writeFileSync(values.json, json + "\n");
console.log(json);
