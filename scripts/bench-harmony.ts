/**
 * gpt-oss's chat side on this machine: loading the o200k_harmony tokenizer from a GGUF (201,088
 * tokens, 446,189 merges; written by scripts/oracle/o200k_harmony_gguf.py), encoding text with it,
 * rendering gpt-oss's chat template, and splitting a streamed harmony answer. Prints one JSON line
 * (medians of --reps runs).
 *
 *   npx bun scripts/bench-harmony.ts --gguf-py tools/llama-oracle/build/llama.cpp/gguf-py [--reps 5]
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { HarmonySplitter } from "../src/engine/reasoning/harmonySplitter.ts";
import { readGgufFile } from "../src/model/gguf/ggufReader.ts";
import { ggufModelTokenizer } from "../src/model/gguf/ggufTokenizer.ts";

const { values } = parseArgs({ options: { "gguf-py": { type: "string" }, reps: { type: "string", default: "5" } } });
if (values["gguf-py"] === undefined) throw new Error("--gguf-py DIR (llama.cpp's gguf-py) is required");
const reps = Number(values.reps);
const root = join(import.meta.dir, "..");
const folder = mkdtempSync(join(tmpdir(), "ctxr-bench-harmony-"));
const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

try {
  const file = join(folder, "o200k-harmony.gguf");
  const written = spawnSync("/usr/bin/python3", [join(root, "scripts/oracle/o200k_harmony_gguf.py"), "--ranks", join(root, "node_modules/js-tiktoken/dist/ranks/o200k_base.js"), "--template", join(root, "scripts/oracle/templates/gpt-oss.jinja"), "--out", file], { env: { ...process.env, GGUF_PY: values["gguf-py"] }, encoding: "utf8" });
  if (written.status !== 0) throw new Error(written.stderr);

  const loads: number[] = [];
  let tokenizer = ggufModelTokenizer(readGgufFile(file).metadata, file).tokenizer;
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    tokenizer = ggufModelTokenizer(readGgufFile(file).metadata, file).tokenizer;
    loads.push(performance.now() - t0);
  }

  const prose = readFileSync(join(root, "README.md"), "utf8");
  const encodes: number[] = [];
  let tokens = 0;
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    tokens = tokenizer.encode(prose).length;
    encodes.push(performance.now() - t0);
  }

  const messages = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Weather in Paris?" },
  ];
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
  const renders: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    for (let j = 0; j < 100; j++) tokenizer.applyChatTemplate(messages, { tools, templateKwargs: { reasoning_effort: "high" } });
    renders.push((performance.now() - t0) / 100);
  }

  const answer = `<|channel|>analysis<|message|>${prose.slice(0, 20000)}<|end|><|start|>assistant<|channel|>final<|message|>${prose.slice(20000, 40000)}`;
  const splits: number[] = [];
  for (let i = 0; i < reps; i++) {
    const splitter = new HarmonySplitter();
    const t0 = performance.now();
    for (let at = 0; at < answer.length; at += 4) splitter.push(answer.slice(at, at + 4));
    splitter.end();
    splits.push(performance.now() - t0);
  }

  console.log(
    JSON.stringify({
      tokenizer_load_ms: Math.round(median(loads)),
      encode_chars: prose.length,
      encode_tokens: tokens,
      encode_tokens_per_s: Math.round(tokens / (median(encodes) / 1000)),
      template_render_ms: Number(median(renders).toFixed(3)),
      split_chars: answer.length,
      split_4char_chunks_mb_per_s: Number((answer.length / 1e6 / (median(splits) / 1000)).toFixed(1)),
    }),
  );
} finally {
  rmSync(folder, { recursive: true, force: true });
}
