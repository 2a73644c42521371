/**
 * GGUF tokenizer metadata made from a Hugging Face tokenizer folder (tokenizer.json and
 * tokenizer_config.json), as llama.cpp's converter writes it: every token by id, token types
 * (special added tokens control, other added tokens user-defined, <0xNN> bytes of a
 * SentencePiece vocabulary byte), merges "left right" for a gpt2 vocabulary, scores for a
 * llama one, the special ids, add_bos_token and the chat template.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ggufArray, ggufBool, ggufString, ggufUint32, type GgufMetadata } from "../../src/model/gguf/ggufMetadata.ts";

type JsonObject = Record<string, unknown>;

export interface TokenizerFolderAsGguf {
  /** "gpt2" (byte-level BPE) or "llama" (SentencePiece). */
  model: "gpt2" | "llama";
  /** tokenizer.ggml.pre (gpt2 only). */
  pre?: string;
  /** A llama vocabulary's scores by id (default: a merge's result scores above later merges' results, single characters lowest). */
  scores?: number[];
}

function contentOf(value: unknown): string | null {
  if (typeof value === "string") return value;
  if (typeof value === "object" && value !== null && typeof (value as JsonObject).content === "string") return (value as JsonObject).content as string;
  return null;
}

export function tokenizerFolderAsGguf(dir: string, options: TokenizerFolderAsGguf): GgufMetadata {
  const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")) as JsonObject;
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")) as JsonObject;
  const model = json.model as { vocab: Record<string, number>; merges: (string | [string, string])[] };
  const added = (json.added_tokens as { id: number; content: string; special: boolean }[]) ?? [];
  const tokens: string[] = [];
  for (const [token, id] of Object.entries(model.vocab)) tokens[id] = token;
  for (const token of added) tokens[token.id] = token.content;
  const types: number[] = tokens.map((token) => (options.model === "llama" && /^<0x[0-9A-F]{2}>$/.test(token) ? 6 : 1));
  for (const token of added) types[token.id] = token.special ? 3 : 4;
  const merges = model.merges.map((merge) => (Array.isArray(merge) ? merge.join(" ") : merge));

  const metadata: GgufMetadata = new Map();
  metadata.set("general.architecture", ggufString("llama"));
  metadata.set("tokenizer.ggml.model", ggufString(options.model));
  if (options.pre !== undefined) metadata.set("tokenizer.ggml.pre", ggufString(options.pre));
  metadata.set("tokenizer.ggml.tokens", ggufArray("string", tokens));
  metadata.set("tokenizer.ggml.token_type", ggufArray("int32", types));
  if (options.model === "gpt2") {
    metadata.set("tokenizer.ggml.merges", ggufArray("string", merges));
  } else {
    metadata.set("tokenizer.ggml.scores", ggufArray("float32", options.scores ?? mergeOrderScores(tokens, types, merges)));
  }
  const idOf = (key: string): number | null => {
    const content = contentOf(config[key]);
    return content === null ? null : tokens.indexOf(content);
  };
  for (const [key, ggufKey] of [
    ["bos_token", "bos_token_id"],
    ["eos_token", "eos_token_id"],
    ["unk_token", "unknown_token_id"],
    ["pad_token", "padding_token_id"],
  ] as const) {
    const id = idOf(key);
    if (id !== null && id >= 0) metadata.set(`tokenizer.ggml.${ggufKey}`, ggufUint32(id));
  }
  if (typeof config.add_bos_token === "boolean") metadata.set("tokenizer.ggml.add_bos_token", ggufBool(config.add_bos_token));
  if (typeof config.add_eos_token === "boolean") metadata.set("tokenizer.ggml.add_eos_token", ggufBool(config.add_eos_token));
  if (typeof config.chat_template === "string") metadata.set("tokenizer.chat_template", ggufString(config.chat_template));
  return metadata;
}

/** SentencePiece-like scores: the piece made by merge i scores -i, other normal pieces below every merge, control and byte tokens 0. */
function mergeOrderScores(tokens: readonly string[], types: readonly number[], merges: readonly string[]): number[] {
  const scores = tokens.map((_, id) => (types[id] === 1 ? -merges.length - 1 - id : 0));
  merges.forEach((merge, index) => {
    const id = tokens.indexOf(merge.replace(" ", ""));
    if (id >= 0 && scores[id]! < -index) scores[id] = -index;
  });
  return scores;
}
