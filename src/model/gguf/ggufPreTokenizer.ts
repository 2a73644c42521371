/**
 * A byte-level BPE vocabulary's pre-tokenizer, named in GGUF by `tokenizer.ggml.pre`, as the
 * pre_tokenizer section of a Hugging Face tokenizer.json: how llama.cpp splits text before
 * BPE (llama-vocab.cpp's regex list for each name), then GPT-2's byte-to-unicode mapping.
 * llama.cpp applies its regexes one after another, each splitting every piece the last one
 * left into matched and unmatched parts; HF's Split with behavior Isolated does the same, so
 * a Sequence of Splits then ByteLevel (regex off) reproduces it.
 *
 * Only the common names are mapped; any other is refused naming the value (llama.cpp itself
 * falls back to its "default" regexes for unknown names, with a warning that quality suffers).
 */
import { GgufMetadataError } from "./ggufMetadataValues.ts";

type JsonObject = Record<string, unknown>;

export interface ByteLevelPreTokenization {
  /** tokenizer.json's pre_tokenizer. */
  preTokenizer: JsonObject;
  /** BPE's ignore_merges: a piece that is a whole token is not split (Llama 3). */
  ignoreMerges: boolean;
  /** Whether llama.cpp adds BOS for this pre-tokenizer when tokenizer.ggml.add_bos_token is absent. */
  addBosByDefault: boolean;
}

/** GPT-2's contractions, letters, numbers, other, spaces (llama.cpp's GPT2 list, one regex). */
const GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

/** Llama 3's regex as llama.cpp writes it: the case-insensitive contractions spelled out. */
const LLAMA3_REGEX =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** Qwen2's: Llama 3's with single digits. */
const QWEN2_REGEX =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/**
 * GPT-4o's (o200k; Phi-4-mini's tokenizer, `gpt-4o` in llama.cpp): letters split at case changes,
 * contractions attached, digits in threes; llama.cpp's spelling without inline (?i:) groups.
 */
const GPT4O_REGEX =
  "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** llama.cpp's "default" (also used when tokenizer.ggml.pre is absent): four regexes in turn. */
const DEFAULT_REGEXES = ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2_REGEX, "\\p{N}+", "[0-9][0-9][0-9]"];

const split = (regex: string): JsonObject => ({ type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false });
const byteLevel = (useRegex: boolean): JsonObject => ({ type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: useRegex });
const splitsThenBytes = (regexes: readonly string[]): JsonObject => ({ type: "Sequence", pretokenizers: [...regexes.map(split), byteLevel(false)] });

const SETUPS: Record<string, ByteLevelPreTokenization> = {
  // HF's ByteLevel with its regex is GPT-2's (with a trailing \s+ that only names what
  // llama.cpp keeps as an unmatched piece anyway).
  "gpt-2": { preTokenizer: byteLevel(true), ignoreMerges: false, addBosByDefault: false },
  default: { preTokenizer: splitsThenBytes(DEFAULT_REGEXES), ignoreMerges: false, addBosByDefault: false },
  "llama-bpe": { preTokenizer: splitsThenBytes([LLAMA3_REGEX]), ignoreMerges: true, addBosByDefault: true },
  qwen2: { preTokenizer: splitsThenBytes([QWEN2_REGEX]), ignoreMerges: false, addBosByDefault: false },
  "gpt-4o": { preTokenizer: splitsThenBytes([GPT4O_REGEX]), ignoreMerges: false, addBosByDefault: false },
};

/** Other names llama.cpp gives the same splitting. */
const ALIASES: Record<string, string> = {
  "phi-2": "gpt-2",
  mpt: "gpt-2",
  olmo: "gpt-2",
  llama3: "llama-bpe",
  "llama-v3": "llama-bpe",
  "deepseek-r1-qwen": "qwen2",
};

export const GGUF_PRE_TOKENIZERS: readonly string[] = [...Object.keys(SETUPS), ...Object.keys(ALIASES)];

/** The pre-tokenization of `tokenizer.ggml.pre` (absent: llama.cpp's "default"); an unknown name is a GgufMetadataError naming it. */
export function ggufPreTokenization(pre: string | undefined): ByteLevelPreTokenization {
  const name = pre === undefined || pre === "" ? "default" : (ALIASES[pre] ?? pre);
  const setup = Object.hasOwn(SETUPS, name) ? SETUPS[name] : undefined;
  if (setup === undefined) {
    throw new GgufMetadataError(
      `GGUF metadata key tokenizer.ggml.pre is ${JSON.stringify(pre)}, a pre-tokenizer ctxr does not know (known: ${GGUF_PRE_TOKENIZERS.join(", ")})`,
    );
  }
  return structuredClone(setup);
}
