/**
 * A tiny random-weight model that speaks harmony as far as its tokenizer and template go: gpt-oss's
 * own chat template (scripts/oracle/templates/gpt-oss.jinja) and the harmony markers as special
 * tokens (ids 259 to 265, as gpt-oss's are control tokens; the bytes still spell them too), with
 * <|return|> and <|call|> ending generation beside the model's </s>.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tinyModelFolder } from "./engineKit.ts";
import { GPT_OSS_TEMPLATE } from "./harmonyVocabulary.ts";

export const HARMONY_IDS = {
  "<|start|>": 259,
  "<|channel|>": 260,
  "<|message|>": 261,
  "<|end|>": 262,
  "<|return|>": 263,
  "<|call|>": 264,
  "<|constrain|>": 265,
} as const;

export function harmonyModelFolder(name: string): { path: string; cleanup(): void } {
  const model = tinyModelFolder({ vocab: 272 }, name);
  const tokenizerPath = join(model.path, "tokenizer.json");
  const tokenizer = JSON.parse(readFileSync(tokenizerPath, "utf8"));
  for (const [content, id] of Object.entries(HARMONY_IDS)) {
    tokenizer.added_tokens.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  }
  writeFileSync(tokenizerPath, JSON.stringify(tokenizer));
  const configPath = join(model.path, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: readFileSync(GPT_OSS_TEMPLATE, "utf8") }));
  const generationPath = join(model.path, "generation_config.json");
  let generation: Record<string, unknown> = {};
  try {
    generation = JSON.parse(readFileSync(generationPath, "utf8"));
  } catch {}
  const eos = generation.eos_token_id;
  const stops = [...(Array.isArray(eos) ? eos : eos === undefined ? [257] : [eos]), HARMONY_IDS["<|return|>"], HARMONY_IDS["<|call|>"]];
  writeFileSync(generationPath, JSON.stringify({ ...generation, eos_token_id: stops }));
  return model;
}
