/**
 * A tiny random-weight model that "thinks": its tokenizer knows `<think>` and `</think>` as
 * added tokens (not special, as in Qwen3's and DeepSeek-R1's tokenizers; ids 259 and 260, the
 * bytes still spell them too), and its chat template is the caller's.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tinyModelFolder } from "./engineKit.ts";

export const THINK_OPEN_ID = 259;
export const THINK_CLOSE_ID = 260;

export function thinkingModelFolder(chatTemplate: string, name: string): { path: string; cleanup(): void } {
  const model = tinyModelFolder({ vocab: 264 }, name);
  const tokenizerPath = join(model.path, "tokenizer.json");
  const tokenizer = JSON.parse(readFileSync(tokenizerPath, "utf8"));
  for (const [id, content] of [
    [THINK_OPEN_ID, "<think>"],
    [THINK_CLOSE_ID, "</think>"],
  ] as const) {
    tokenizer.added_tokens.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
  }
  writeFileSync(tokenizerPath, JSON.stringify(tokenizer));
  const configPath = join(model.path, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: chatTemplate }));
  return model;
}
