/**
 * gpt-oss's o200k_harmony vocabulary as a vocabulary-only GGUF written by llama.cpp's gguf-py
 * (scripts/oracle/o200k_harmony_gguf.py): o200k_base's real ranks from js-tiktoken (installed with
 * the LangChain packages), the harmony special tokens at their ids, pre-tokenizer "gpt-4o" and
 * gpt-oss's own chat template (scripts/oracle/templates/gpt-oss.jinja).
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT, runProgram } from "./cli.ts";

export const O200K_RANKS = join(REPO_ROOT, "node_modules", "js-tiktoken", "dist", "ranks", "o200k_base.js");
export const GPT_OSS_TEMPLATE = join(REPO_ROOT, "scripts", "oracle", "templates", "gpt-oss.jinja");
const SCRIPT = join(REPO_ROOT, "scripts", "oracle", "o200k_harmony_gguf.py");
const PYTHON = "/usr/bin/python3";

/** Whether the ranks and Python are here to write the file. */
export const harmonyVocabularyAvailable = existsSync(O200K_RANKS) && existsSync(PYTHON);

/** Writes the file into `folder` with gguf-py from `ggufPy`; returns its path. */
export function writeHarmonyVocabulary(folder: string, ggufPy: string): string {
  const file = join(folder, "o200k-harmony.gguf");
  const run = runProgram([PYTHON, SCRIPT, "--ranks", O200K_RANKS, "--template", GPT_OSS_TEMPLATE, "--out", file], { env: { GGUF_PY: ggufPy } });
  if (run.code !== 0) throw new Error(`o200k_harmony_gguf.py failed (exit ${run.code}):\n${run.stderr}`);
  return file;
}

/** Texts that exercise gpt-4o's splitting (case changes, contractions, digits in threes, paths) and the harmony markers. */
export const HARMONY_TEXTS = [
  "<|start|>assistant<|channel|>analysis<|message|>We need to answer.<|end|><|start|>assistant<|channel|>final<|message|>Four.<|return|>",
  "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
  "<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{\"q\":1}<|call|><|startoftext|><|endoftext|><|reserved_200013|>",
  "HTMLParser camelCaseWords XMLHttpRequest iPhone McDONALD's DON'T We'LL they'RE I'M",
  "1234567 12 345 6789012345 3.14159 0x1F 1e-10 ２０２４年",
  "path/to/file.ts\r\n/usr/bin/env  ::  a//b\n\n\n  indented\t\ttabs",
  "Ünïcödé ÀÉÎ straße ǅungla Ωmega ΣΙΓΜΑ σίγμα Привет МИР 東京タワー 한국어 🙂👍🏽 👨‍👩‍👧",
];
