/**
 * A GGUF file's tokenizer metadata as the Hugging Face files the server's tokenizer code
 * takes (tokenizer.json, tokenizer_config.json, generation_config.json's stop ids), built
 * to tokenize as llama.cpp does on the same file.
 *
 * Two vocabularies (`tokenizer.ggml.model`):
 * - "gpt2": byte-level BPE. `tokenizer.ggml.tokens` (GPT-2 byte-to-unicode spelled),
 *   `tokenizer.ggml.merges` ("left right"), the pre-tokenizer of `tokenizer.ggml.pre`
 *   (ggufPreTokenizer.ts).
 * - "llama": SentencePiece. Pieces with ▁ for spaces, `tokenizer.ggml.scores`, byte tokens
 *   <0xNN>; a BPE model with byte fallback and merges derived from the scores
 *   (sentencePieceMerges.ts), ▁ prepended (`tokenizer.ggml.add_space_prefix`, default true)
 *   and spaces replaced by ▁ in a normalizer, as HF's legacy Llama tokenizer.json has it.
 *
 * `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
 * 6 byte. Control and unknown tokens become special added tokens, user-defined ones plain
 * added tokens (matched whole in text, as llama.cpp does).
 * Special ids: `tokenizer.ggml.{bos,eos,eot,eom,unknown,padding}_token_id`; stop ids are
 * eos, eot and eom (eot, when absent: the token "<end_of_turn>", as llama.cpp finds Gemma's), and
 * the tokens llama.cpp ends generation on by their text (Phi-3's <|end|>, endOfGenerationTokens.ts).
 * Phi-3-named files: llama.cpp's right-stripping special tokens (rightStrippingTokens.ts).
 * `tokenizer.ggml.add_bos_token` / `add_eos_token` (defaults as
 * llama.cpp's: SPM and Llama 3 add BOS). Chat template: `tokenizer.chat_template`.
 *
 * Pure: metadata in, JSON objects out; errors name the key.
 */
import { endOfGenerationIds } from "./endOfGenerationTokens.ts";
import { modelTokenizerFromJson, type ModelTokenizer } from "../modelTokenizer.ts";
import {
  GgufMetadataError,
  optionalBool,
  optionalInteger,
  optionalNumberArray,
  optionalString,
  optionalStringArray,
  requiredString,
  requiredStringArray,
  type GgufMetadataLike,
} from "./ggufMetadataValues.ts";
import { ggufPreTokenization } from "./ggufPreTokenizer.ts";
import { sentencePieceMerges } from "./sentencePieceMerges.ts";
import { TOKEN_TYPE } from "./ggufTokenTypes.ts";
import { rightStrippingTokens, stripWhitespaceAfter } from "./rightStrippingTokens.ts";

type JsonObject = Record<string, unknown>;

const GEMMA_END_OF_TURN = "<end_of_turn>";

export { TOKEN_TYPE };

export interface GgufTokenizerFiles {
  /** tokenizer.json's object. */
  tokenizerJson: JsonObject;
  /** tokenizer_config.json's object (special tokens, add_bos_token, add_eos_token, chat_template). */
  tokenizerConfig: JsonObject;
  /** generation_config.json's object: eos_token_id, the ids that end generation (eos, eot, eom). */
  generationConfig: { eos_token_id: number[] };
  /** The chat template (tokenizer.chat_template), or null. */
  chatTemplate: string | null;
  /** Whether plain completion prompts start with BOS (llama.cpp's add_bos). */
  addBos: boolean;
  /** The vocabulary kind (tokenizer.ggml.model). */
  vocabKind: "gpt2" | "llama";
  /**
   * Tokens after which llama.cpp drops whitespace, by the file's general.name (Phi-3's:
   * rightStrippingTokens.ts); applied to the text before it is tokenized, since llama.cpp strips
   * ASCII whitespace only where tokenizer.json's rstrip would strip any.
   */
  rightStripping: string[];
}

const KEY = {
  model: "tokenizer.ggml.model",
  pre: "tokenizer.ggml.pre",
  tokens: "tokenizer.ggml.tokens",
  tokenType: "tokenizer.ggml.token_type",
  scores: "tokenizer.ggml.scores",
  merges: "tokenizer.ggml.merges",
  bos: "tokenizer.ggml.bos_token_id",
  eos: "tokenizer.ggml.eos_token_id",
  eot: "tokenizer.ggml.eot_token_id",
  eom: "tokenizer.ggml.eom_token_id",
  unk: "tokenizer.ggml.unknown_token_id",
  pad: "tokenizer.ggml.padding_token_id",
  addBos: "tokenizer.ggml.add_bos_token",
  addEos: "tokenizer.ggml.add_eos_token",
  addSpacePrefix: "tokenizer.ggml.add_space_prefix",
  chatTemplate: "tokenizer.chat_template",
  name: "general.name",
} as const;

function tokenTypes(metadata: GgufMetadataLike, count: number): number[] {
  const types = optionalNumberArray(metadata, KEY.tokenType);
  if (types === undefined) return new Array(count).fill(TOKEN_TYPE.normal);
  if (types.length !== count) throw new GgufMetadataError(`GGUF metadata key ${KEY.tokenType} has ${types.length} entries for ${count} tokens (${KEY.tokens})`);
  return types;
}

/** An id key's value, checked against the vocabulary; `fallback` when absent. */
function tokenId(metadata: GgufMetadataLike, key: string, count: number, fallback: number | null = null): number | null {
  const id = optionalInteger(metadata, key);
  if (id === undefined) return fallback !== null && fallback < count ? fallback : null;
  if (id >= count) throw new GgufMetadataError(`GGUF metadata key ${key} is ${id}, not a token id (${KEY.tokens} has ${count})`);
  return id;
}

function checkUnique(tokens: readonly string[]): void {
  const seen = new Map<string, number>();
  tokens.forEach((token, id) => {
    const first = seen.get(token);
    if (first !== undefined) throw new GgufMetadataError(`GGUF metadata key ${KEY.tokens} holds ${JSON.stringify(token)} twice (ids ${first} and ${id})`);
    seen.set(token, id);
  });
}

function vocabObject(tokens: readonly string[]): Record<string, number> {
  // No prototype: a token may be spelled "__proto__".
  const vocab = Object.create(null) as Record<string, number>;
  tokens.forEach((token, id) => (vocab[token] = id));
  return vocab;
}

function addedTokens(tokens: readonly string[], types: readonly number[], specialIds: ReadonlySet<number>): JsonObject[] {
  const added: JsonObject[] = [];
  tokens.forEach((content, id) => {
    const type = types[id];
    const special = type === TOKEN_TYPE.control || type === TOKEN_TYPE.unknown || specialIds.has(id);
    if (!special && type !== TOKEN_TYPE.userDefined) return;
    added.push({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special });
  });
  return added;
}

function byteLevelBpe(metadata: GgufMetadataLike, tokens: readonly string[]): { model: JsonObject; preTokenizer: JsonObject; decoder: JsonObject; normalizer: null; addBosByDefault: boolean } {
  const merges = optionalStringArray(metadata, KEY.merges);
  if (merges === undefined) throw new GgufMetadataError(`GGUF metadata key ${KEY.merges} is missing (a "gpt2" vocabulary needs its merges)`);
  const vocab = vocabObject(tokens);
  const pairs = merges.map((merge, index): [string, string] => {
    // llama.cpp splits at the first space after the first character.
    const cut = merge.indexOf(" ", 1);
    if (cut < 0) throw new GgufMetadataError(`GGUF metadata key ${KEY.merges}[${index}] is ${JSON.stringify(merge)}, not "left right"`);
    const pair: [string, string] = [merge.slice(0, cut), merge.slice(cut + 1)];
    for (const part of pair) {
      if (!Object.hasOwn(vocab, part)) throw new GgufMetadataError(`GGUF metadata key ${KEY.merges}[${index}] ${JSON.stringify(merge)}: ${JSON.stringify(part)} is not a token`);
    }
    return pair;
  });
  const pre = ggufPreTokenization(optionalString(metadata, KEY.pre));
  return {
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: pre.ignoreMerges, vocab, merges: pairs },
    preTokenizer: pre.preTokenizer,
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    normalizer: null,
    addBosByDefault: pre.addBosByDefault,
  };
}

function sentencePieceBpe(metadata: GgufMetadataLike, tokens: readonly string[], types: readonly number[], unk: number | null): { model: JsonObject; preTokenizer: null; decoder: JsonObject; normalizer: JsonObject; addBosByDefault: boolean } {
  const scores = optionalNumberArray(metadata, KEY.scores);
  if (scores === undefined) throw new GgufMetadataError(`GGUF metadata key ${KEY.scores} is missing (a "llama" vocabulary's merges come from its scores)`);
  if (scores.length !== tokens.length) throw new GgufMetadataError(`GGUF metadata key ${KEY.scores} has ${scores.length} entries for ${tokens.length} tokens (${KEY.tokens})`);
  types.forEach((type, id) => {
    if (type === TOKEN_TYPE.byte && !/^<0x[0-9A-F]{2}>$/.test(tokens[id]!)) {
      throw new GgufMetadataError(`GGUF metadata key ${KEY.tokens}[${id}] is ${JSON.stringify(tokens[id])}, a byte token (${KEY.tokenType} 6) that is not <0xNN>`);
    }
  });
  const merges = sentencePieceMerges({ tokens, scores, mergeable: (id) => types[id] !== TOKEN_TYPE.control && types[id] !== TOKEN_TYPE.byte });
  const addSpacePrefix = optionalBool(metadata, KEY.addSpacePrefix) ?? true;
  const replaceSpaces = { type: "Replace", pattern: { String: " " }, content: "\u2581" };
  const decoders: JsonObject[] = [{ type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }];
  if (addSpacePrefix) decoders.push({ type: "Strip", content: " ", start: 1, stop: 0 });
  return {
    model: {
      type: "BPE",
      dropout: null,
      unk_token: unk === null ? null : tokens[unk],
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
      vocab: vocabObject(tokens),
      merges,
    },
    preTokenizer: null,
    decoder: { type: "Sequence", decoders },
    normalizer: addSpacePrefix ? { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" }, replaceSpaces] } : replaceSpaces,
    addBosByDefault: true,
  };
}

/** The Hugging Face tokenizer files of a GGUF file's metadata. */
export function ggufTokenizerFiles(metadata: GgufMetadataLike): GgufTokenizerFiles {
  const kind = requiredString(metadata, KEY.model);
  if (kind !== "gpt2" && kind !== "llama") {
    throw new GgufMetadataError(`GGUF metadata key ${KEY.model} is ${JSON.stringify(kind)}; ctxr reads "gpt2" (byte-level BPE) and "llama" (SentencePiece) vocabularies`);
  }
  const tokens = requiredStringArray(metadata, KEY.tokens);
  if (tokens.length === 0) throw new GgufMetadataError(`GGUF metadata key ${KEY.tokens} is empty`);
  checkUnique(tokens);
  const types = tokenTypes(metadata, tokens.length);
  const spm = kind === "llama";
  // llama.cpp's defaults for a SentencePiece vocabulary: unk 0, bos 1, eos 2.
  const bos = tokenId(metadata, KEY.bos, tokens.length, spm ? 1 : null);
  const eos = tokenId(metadata, KEY.eos, tokens.length, spm ? 2 : null);
  const unk = tokenId(metadata, KEY.unk, tokens.length, spm ? 0 : null);
  const pad = tokenId(metadata, KEY.pad, tokens.length);
  // Without the key, llama.cpp takes Gemma's "<end_of_turn>" as the end of turn (llama-vocab.cpp
  // finds it by name): llama.cpp's converter writes no eot id for Gemma 3.
  const eot = tokenId(metadata, KEY.eot, tokens.length) ?? (tokens.includes(GEMMA_END_OF_TURN) ? tokens.indexOf(GEMMA_END_OF_TURN) : null);
  const eom = tokenId(metadata, KEY.eom, tokens.length);

  const parts = spm ? sentencePieceBpe(metadata, tokens, types, unk) : byteLevelBpe(metadata, tokens);
  const specialIds = new Set([bos, eos, unk, pad, eot, eom].filter((id): id is number => id !== null));
  const tokenizerJson: JsonObject = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: addedTokens(tokens, types, specialIds),
    normalizer: parts.normalizer,
    pre_tokenizer: parts.preTokenizer,
    post_processor: null,
    decoder: parts.decoder,
    model: parts.model,
  };

  const addBos = optionalBool(metadata, KEY.addBos) ?? parts.addBosByDefault;
  const addEos = optionalBool(metadata, KEY.addEos) ?? false;
  const chatTemplate = optionalString(metadata, KEY.chatTemplate) ?? null;
  const tokenizerConfig: JsonObject = {
    add_bos_token: addBos && bos !== null,
    add_eos_token: addEos && eos !== null,
    clean_up_tokenization_spaces: false,
    ...(bos !== null ? { bos_token: tokens[bos] } : {}),
    ...(eos !== null ? { eos_token: tokens[eos] } : {}),
    ...(unk !== null ? { unk_token: tokens[unk] } : {}),
    ...(pad !== null ? { pad_token: tokens[pad] } : {}),
    ...(chatTemplate !== null ? { chat_template: chatTemplate } : {}),
  };
  const stopIds: number[] = [];
  for (const id of [eos, eot, eom, ...endOfGenerationIds(tokens)]) if (id !== null && !stopIds.includes(id)) stopIds.push(id);
  const rightStripping = rightStrippingTokens(optionalString(metadata, KEY.name), tokens, types);
  return { tokenizerJson, tokenizerConfig, generationConfig: { eos_token_id: stopIds }, chatTemplate, addBos: addBos && bos !== null, vocabKind: kind, rightStripping };
}

/** The server's tokenizer of a GGUF file (`file` names it in messages and is the tokenizer's dir). */
export function ggufModelTokenizer(metadata: GgufMetadataLike, file: string): { tokenizer: ModelTokenizer; addBos: boolean } {
  const files = ggufTokenizerFiles(metadata);
  const tokenizer = modelTokenizerFromJson({
    dir: file,
    tokenizerJson: files.tokenizerJson,
    config: files.tokenizerConfig,
    generationConfig: files.generationConfig,
    chatTemplate: files.chatTemplate === null ? null : { text: files.chatTemplate, file: `${file} (${KEY.chatTemplate})` },
    names: { tokenizer: `${file} (tokenizer.ggml.*)`, config: `${file} (tokenizer.ggml.*)`, generation: `${file} (tokenizer.ggml.eos/eot/eom_token_id)` },
    beforeEncode: stripWhitespaceAfter(files.rightStripping) ?? undefined,
  });
  return { tokenizer, addBos: files.addBos };
}
