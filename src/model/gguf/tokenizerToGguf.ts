/**
 * The `tokenizer.*` GGUF metadata of a Hugging Face tokenizer (tokenizer.json,
 * tokenizer_config.json, optionally chat_template.jinja), in llama.cpp's conventions,
 * so a file we write tokenizes in llama.cpp as in transformers:
 *
 *   tokenizer.ggml.model       "gpt2" for byte-level BPE, "llama" for SentencePiece-style
 *                              BPE (▁ for spaces, <0xXX> byte fallback)
 *   tokenizer.ggml.pre         gpt2 only: the pre-tokenizer ("llama-bpe", "qwen2", "gpt-2", else "default")
 *   tokenizer.ggml.tokens      every id's text; ids the tokenizer lacks below vocab_size are "[PAD<id>]"
 *   tokenizer.ggml.token_type  1 normal, 2 unknown, 3 control (special added tokens),
 *                              4 user-defined (other added tokens), 5 unused (padding), 6 byte (<0xXX>)
 *   tokenizer.ggml.merges      gpt2: "left right" strings in rank order
 *   tokenizer.ggml.scores      llama: a merge result scores −(rank + 1), so llama.cpp's highest-score-
 *                              first merging follows the merge ranks; other normal tokens score below
 *                              every merge; control and byte tokens 0
 *   tokenizer.ggml.bos_token_id / eos_token_id / unknown_token_id / padding_token_id where known,
 *   tokenizer.ggml.add_bos_token (and add_eos_token when the config says), tokenizer.chat_template.
 *
 * Pure: takes the parsed JSON objects.
 */
import { type GgufMetadata, ggufArray, ggufBool, ggufString, ggufUint32 } from "./ggufMetadata.ts";
import { TOKEN_TYPE } from "./ggufTokenTypes.ts";

export class TokenizerConversionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenizerConversionError";
  }
}

export interface HfTokenizerFiles {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown> | null;
  /** config.json: vocab_size, bos_token_id, eos_token_id, pad_token_id. */
  modelConfig: Record<string, unknown>;
  /** chat_template.jinja, when the folder has one. */
  chatTemplateFile: string | null;
}

export { TOKEN_TYPE };

const LLAMA3_DIGITS = "\\p{N}{1,3}";

function asRecord(value: unknown): Record<string, unknown> | null {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}

/** Every pre-tokenizer and decoder type mentioned (Sequences flattened). */
function componentTypes(component: unknown, found: Record<string, unknown>[] = []): Record<string, unknown>[] {
  const record = asRecord(component);
  if (!record) return found;
  found.push(record);
  for (const key of ["pretokenizers", "decoders"]) {
    if (Array.isArray(record[key])) for (const inner of record[key] as unknown[]) componentTypes(inner, found);
  }
  return found;
}

function tokenText(value: unknown): string | null {
  if (typeof value === "string") return value;
  const record = asRecord(value);
  return record && typeof record.content === "string" ? record.content : null;
}

export function tokenizerToGguf(files: HfTokenizerFiles): GgufMetadata {
  const { tokenizerJson, modelConfig } = files;
  const tokenizerConfig = files.tokenizerConfig ?? {};
  const model = asRecord(tokenizerJson.model);
  if (!model) throw new TokenizerConversionError("tokenizer.json has no model object");
  if (model.type !== "BPE") throw new TokenizerConversionError(`tokenizer.json model type ${JSON.stringify(model.type)} is not supported (BPE only)`);
  const vocab = asRecord(model.vocab);
  if (!vocab) throw new TokenizerConversionError("tokenizer.json model.vocab is not an object");

  const components = [...componentTypes(tokenizerJson.pre_tokenizer), ...componentTypes(tokenizerJson.decoder)];
  const byteLevel = components.some((c) => c.type === "ByteLevel");
  const sentencePiece = model.byte_fallback === true || components.some((c) => c.type === "Metaspace" || (c.type === "Replace" && JSON.stringify(c).includes("▁")));
  if (!byteLevel && !sentencePiece) throw new TokenizerConversionError("tokenizer.json is neither byte-level BPE (ByteLevel) nor SentencePiece-style BPE (▁, byte fallback)");
  const kind = byteLevel ? "gpt2" : "llama";

  const texts: (string | undefined)[] = [];
  for (const [text, id] of Object.entries(vocab)) {
    if (typeof id !== "number" || !Number.isSafeInteger(id) || id < 0) throw new TokenizerConversionError(`tokenizer.json vocab entry ${JSON.stringify(text)} has a bad id ${JSON.stringify(id)}`);
    texts[id] = text;
  }
  const types: number[] = [];
  const added = Array.isArray(tokenizerJson.added_tokens) ? (tokenizerJson.added_tokens as unknown[]) : [];
  for (const entry of added) {
    const token = asRecord(entry);
    if (!token || typeof token.id !== "number" || typeof token.content !== "string") throw new TokenizerConversionError("tokenizer.json added_tokens has an entry without id and content");
    texts[token.id] = token.content;
    types[token.id] = token.special === true ? TOKEN_TYPE.control : TOKEN_TYPE.userDefined;
  }
  const declared = typeof modelConfig.vocab_size === "number" ? modelConfig.vocab_size : 0;
  const size = Math.max(texts.length, declared);
  const unkText = typeof model.unk_token === "string" ? model.unk_token : null;
  const tokens: string[] = new Array(size);
  for (let id = 0; id < size; id++) {
    const text = texts[id];
    if (text === undefined) {
      tokens[id] = `[PAD${id}]`;
      types[id] = TOKEN_TYPE.unused;
      continue;
    }
    tokens[id] = text;
    if (text === unkText) types[id] = TOKEN_TYPE.unknown;
    else if (types[id] !== undefined) continue;
    else if (kind === "llama" && /^<0x[0-9A-F]{2}>$/.test(text)) types[id] = TOKEN_TYPE.byte;
    else types[id] = TOKEN_TYPE.normal;
  }

  const merges = (Array.isArray(model.merges) ? (model.merges as unknown[]) : []).map((merge, rank) => {
    if (typeof merge === "string") return merge;
    if (Array.isArray(merge) && merge.length === 2 && merge.every((part) => typeof part === "string")) return `${merge[0]} ${merge[1]}`;
    throw new TokenizerConversionError(`tokenizer.json merge #${rank} is neither "a b" nor ["a", "b"]`);
  });

  const metadata: GgufMetadata = new Map();
  metadata.set("tokenizer.ggml.model", ggufString(kind));
  if (kind === "gpt2") metadata.set("tokenizer.ggml.pre", ggufString(preTokenizerName(components)));
  metadata.set("tokenizer.ggml.tokens", ggufArray("string", tokens));
  if (kind === "llama") {
    const rankOf = new Map<string, number>();
    merges.forEach((merge, rank) => {
      const space = merge.indexOf(" ");
      const result = merge.slice(0, space) + merge.slice(space + 1);
      if (!rankOf.has(result)) rankOf.set(result, rank);
    });
    const scores = tokens.map((text, id) => {
      if (types[id] !== TOKEN_TYPE.normal) return 0;
      const rank = rankOf.get(text);
      return rank !== undefined ? -(rank + 1) : -(merges.length + id + 1);
    });
    metadata.set("tokenizer.ggml.scores", ggufArray("float32", scores));
  }
  metadata.set("tokenizer.ggml.token_type", ggufArray("int32", types));
  if (kind === "gpt2") metadata.set("tokenizer.ggml.merges", ggufArray("string", merges));

  const idOf = new Map<string, number>();
  tokens.forEach((text, id) => {
    if (!idOf.has(text) || types[id] === TOKEN_TYPE.control) idOf.set(text, id);
  });
  const specialId = (configKey: string, modelKey: string): number | undefined => {
    const text = tokenText(tokenizerConfig[configKey]);
    if (text !== null && idOf.has(text)) return idOf.get(text);
    const fromModel = modelConfig[modelKey];
    const id = Array.isArray(fromModel) ? fromModel[0] : fromModel;
    return typeof id === "number" && Number.isSafeInteger(id) && id >= 0 && id < size ? id : undefined;
  };
  const specials: [string, number | undefined][] = [
    ["bos_token_id", specialId("bos_token", "bos_token_id")],
    ["eos_token_id", specialId("eos_token", "eos_token_id")],
    ["unknown_token_id", specialId("unk_token", "unk_token_id") ?? (unkText !== null ? idOf.get(unkText) : undefined)],
    ["padding_token_id", specialId("pad_token", "pad_token_id")],
  ];
  for (const [key, id] of specials) if (id !== undefined) metadata.set(`tokenizer.ggml.${key}`, ggufUint32(id));
  const addBos = typeof tokenizerConfig.add_bos_token === "boolean" ? tokenizerConfig.add_bos_token : postProcessorAddsBos(tokenizerJson, kind);
  metadata.set("tokenizer.ggml.add_bos_token", ggufBool(addBos));
  if (typeof tokenizerConfig.add_eos_token === "boolean") metadata.set("tokenizer.ggml.add_eos_token", ggufBool(tokenizerConfig.add_eos_token));
  const template = chatTemplate(tokenizerConfig, files.chatTemplateFile);
  if (template !== null) metadata.set("tokenizer.chat_template", ggufString(template));
  return metadata;
}

function preTokenizerName(components: Record<string, unknown>[]): string {
  for (const component of components) {
    if (component.type !== "Split") continue;
    const pattern = asRecord(component.pattern);
    const regex = pattern && typeof pattern.Regex === "string" ? pattern.Regex : "";
    if (regex.includes("(?i:'s|'t|'re|'ve|'m|'ll|'d)")) return regex.includes(LLAMA3_DIGITS) ? "llama-bpe" : "qwen2";
  }
  if (components.some((c) => c.type === "ByteLevel" && c.use_regex !== false)) return "gpt-2";
  return "default";
}

/** Whether tokenizer.json's post-processor puts a special token in front (Llama's <s>). */
function postProcessorAddsBos(tokenizerJson: Record<string, unknown>, kind: string): boolean {
  for (const component of componentTypes(tokenizerJson.post_processor)) {
    if (component.type === "TemplateProcessing" && Array.isArray(component.single)) {
      const first = asRecord((component.single as unknown[])[0]);
      return first !== null && "SpecialToken" in first;
    }
  }
  return kind === "llama";
}

function chatTemplate(tokenizerConfig: Record<string, unknown>, file: string | null): string | null {
  const value = tokenizerConfig.chat_template;
  if (typeof value === "string") return value;
  if (Array.isArray(value)) {
    const named = value.map(asRecord).find((entry) => entry?.name === "default");
    if (named && typeof named.template === "string") return named.template;
  }
  return file;
}
