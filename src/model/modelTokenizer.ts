/**
 * A Hugging Face model folder's tokenizer for the generation server: tokenizer.json
 * loaded by @huggingface/tokenizers (with tokenizer_config.json as its config), the
 * chat template rendered by @huggingface/jinja, and the ids that end generation.
 *
 * Files read from the folder:
 * - tokenizer.json (required): the tokenizer.
 * - tokenizer_config.json (required): special tokens, decoding options, usually the
 *   chat template.
 * - chat_template.jinja or chat_template.json (optional): where newer checkpoints keep
 *   the chat template; tokenizer_config.json's chat_template wins when both exist.
 * - generation_config.json (optional): eos_token_id (a number or a list) adds stop ids.
 *
 * A missing or malformed file is a ModelTokenizerError naming the file. A chat template
 * that fails to parse does not stop loading (plain completions still work): the
 * error is raised, naming the file, when a chat prompt is rendered.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { AddedTokenBoundary } from "./addedTokenBoundary.ts";
import { byteToUnicode } from "./byteTokenizer.ts";

export interface ChatTemplateMessage {
  role: string;
  content: string;
  /** An assistant's tool calls (arguments parsed to objects where they are JSON, as templates expect). */
  tool_calls?: { id?: string; type: "function"; function: { name: string; arguments: unknown } }[];
  /** A tool message's answer is to this call. */
  tool_call_id?: string;
  name?: string;
  /** An assistant's reasoning of an earlier turn (templates read it as reasoning_content, gpt-oss's as thinking). */
  reasoning_content?: string;
}

export interface ChatTemplateOptions {
  /** Open an assistant turn at the end (add_generation_prompt), default true. */
  addGenerationPrompt?: boolean;
  /** More template variables (vLLM's chat_template_kwargs, e.g. enable_thinking); they cannot replace messages. */
  templateKwargs?: Record<string, unknown>;
  /** The tools the model may call ({type: "function", function: {name, description, parameters}}), the template's `tools`. */
  tools?: readonly unknown[];
}

export interface DecodeOptions {
  /** Leave out special tokens (<s>, </s>, <|im_end|>...), default false. */
  skipSpecialTokens?: boolean;
}

export interface ModelTokenizer {
  /** The model folder it was loaded from. */
  readonly dir: string;
  /** Token ids of a text; special tokens written in the text are recognised, none are added. */
  encode(text: string): number[];
  /** The prompt's ids: encode(text) (a chat template writes its own BOS). */
  promptIds(text: string): number[];
  /** The text of ids (ids the tokenizer does not know decode to nothing). */
  decode(ids: readonly number[], options?: DecodeOptions): string;
  /** Renders the chat template with the special tokens of tokenizer_config.json. */
  applyChatTemplate(messages: readonly ChatTemplateMessage[], options?: ChatTemplateOptions): string;
  /** Whether the folder has a chat template that parses (applyChatTemplate throws when not). */
  readonly hasChatTemplate: boolean;
  /** The chat template's source (null without one), to tell what it renders (tools) and how. */
  readonly chatTemplateSource: string | null;
  /** Ids that end generation: tokenizer_config.json's eos_token, then generation_config.json's eos_token_id. */
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
  /** One more than the largest id the tokenizer knows (added tokens included); a model's vocab_size may be larger. */
  readonly vocabSize: number;
  /** A token's text on its own, for logprobs (a lone piece of a multi-byte character reads as U+FFFD). */
  tokenText(id: number): string;
  /** A token's bytes (byte-level and byte-fallback tokens give their raw bytes), for logprobs' `bytes`. */
  tokenBytes(id: number): number[];
  /** Whether an id is a special token (added token with special: true). */
  isSpecialToken(id: number): boolean;
  /** How token strings stand for bytes: byte_level (GPT-2 style), byte_fallback (SentencePiece's <0xNN>) or raw (xgrammar's names). */
  readonly vocabType: "byte_level" | "byte_fallback" | "raw";
  /** Whether encoding puts a space (SentencePiece's ▁) before the text. */
  readonly prependsSpace: boolean;
  /** Every id's token string as tokenizer.json writes it ("" for ids it has none), for grammar engines. */
  encodedVocab(): string[];
  /**
   * Whether encode(text) is provably encode(text.slice(0, at)) followed by encode(text.slice(at)):
   * the cut is in front of an added token the tokenizer splits out whole (addedTokenBoundary.ts).
   */
  splitsAt(text: string, at: number): boolean;
  /**
   * The text ids stand for, exactly: decode without skipping special tokens or cleaning up
   * spaces; null when that is not exact (an id the tokenizer does not know, a partial UTF-8
   * character).
   */
  exactText(ids: readonly number[]): string | null;
}

export class ModelTokenizerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelTokenizerError";
  }
}

/** raise_exception(...) called by a chat template: the message is the template's. */
export class ChatTemplateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ChatTemplateError";
  }
}

type JsonObject = Record<string, unknown>;

const SPECIAL_TOKEN_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"] as const;

async function readOptionalText(path: string): Promise<string | null> {
  try {
    return await readFile(path, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    throw new ModelTokenizerError(`cannot read ${path}: ${(error as Error).message}`);
  }
}

async function readJsonObject(dir: string, name: string, required: true): Promise<JsonObject>;
async function readJsonObject(dir: string, name: string, required: false): Promise<JsonObject | null>;
async function readJsonObject(dir: string, name: string, required: boolean): Promise<JsonObject | null> {
  const path = join(dir, name);
  const text = await readOptionalText(path);
  if (text === null) {
    if (required) throw new ModelTokenizerError(`${name} not found in ${dir} (a Hugging Face model folder needs it)`);
    return null;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ModelTokenizerError(`${path} is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ModelTokenizerError(`${path} must hold a JSON object`);
  }
  return value as JsonObject;
}

/** A special token in tokenizer_config.json: a string, or an AddedToken object with content. */
function specialTokenContent(config: JsonObject, key: string, path: string): string | null {
  const value = config[key];
  if (value === undefined || value === null) return null;
  if (typeof value === "string") return value;
  if (typeof value === "object" && !Array.isArray(value) && typeof (value as JsonObject).content === "string") {
    return (value as JsonObject).content as string;
  }
  throw new ModelTokenizerError(`${path}: ${key} must be a string or an object with a string content`);
}

interface TemplateSource {
  text: string;
  file: string;
}

function templateFromConfigValue(value: unknown, file: string): TemplateSource {
  if (typeof value === "string") return { text: value, file };
  // A list of named templates: [{ name: "default", template: "..." }, { name: "tool_use", ... }].
  if (Array.isArray(value)) {
    const named = value.filter(
      (entry): entry is { name: string; template: string } =>
        typeof entry === "object" && entry !== null && typeof entry.name === "string" && typeof entry.template === "string",
    );
    if (named.length !== value.length || named.length === 0) {
      throw new ModelTokenizerError(`${file}: chat_template must be a string or a non-empty list of {name, template}`);
    }
    return { text: (named.find((entry) => entry.name === "default") ?? named[0]!).template, file };
  }
  throw new ModelTokenizerError(`${file}: chat_template must be a string or a list of {name, template}`);
}

async function findChatTemplate(dir: string, config: JsonObject): Promise<TemplateSource | null> {
  if (config.chat_template !== undefined && config.chat_template !== null) {
    return templateFromConfigValue(config.chat_template, join(dir, "tokenizer_config.json"));
  }
  const jinjaPath = join(dir, "chat_template.jinja");
  const jinja = await readOptionalText(jinjaPath);
  if (jinja !== null) return { text: jinja, file: jinjaPath };
  const json = await readJsonObject(dir, "chat_template.json", false);
  if (json !== null && json.chat_template !== undefined) {
    return templateFromConfigValue(json.chat_template, join(dir, "chat_template.json"));
  }
  return null;
}

function generationEosIds(config: JsonObject | null, path: string): number[] {
  if (config === null || config.eos_token_id === undefined || config.eos_token_id === null) return [];
  const value = config.eos_token_id;
  const ids = Array.isArray(value) ? value : [value];
  for (const id of ids) {
    if (!Number.isSafeInteger(id) || (id as number) < 0) {
      throw new ModelTokenizerError(`${path}: eos_token_id must be a non-negative integer or a list of them, got ${JSON.stringify(value)}`);
    }
  }
  return ids as number[];
}

/** Whether the tokenizer decodes GPT-2 byte-level tokens (decoder ByteLevel, alone or in a Sequence). */
function hasByteLevelDecoder(decoder: unknown): boolean {
  if (typeof decoder !== "object" || decoder === null) return false;
  const { type, decoders } = decoder as { type?: unknown; decoders?: unknown };
  if (type === "ByteLevel") return true;
  return type === "Sequence" && Array.isArray(decoders) && decoders.some(hasByteLevelDecoder);
}

/** SentencePiece-style tokenizers put ▁ before the text: a Metaspace pre-tokenizer or a Prepend normalizer. */
function prependsSpaceMark(section: unknown): boolean {
  if (typeof section !== "object" || section === null) return false;
  const { type, prepend_scheme, add_prefix_space, prepend, normalizers, pretokenizers } = section as Record<string, unknown>;
  if (type === "Metaspace") return prepend_scheme === "always" || prepend_scheme === "first" || (prepend_scheme === undefined && add_prefix_space === true);
  if (type === "Prepend") return prepend === "\u2581";
  if (type === "Sequence") return [normalizers, pretokenizers].some((list) => Array.isArray(list) && list.some(prependsSpaceMark));
  return false;
}

function hasByteFallbackDecoder(decoder: unknown): boolean {
  if (typeof decoder !== "object" || decoder === null) return false;
  const { type, decoders } = decoder as { type?: unknown; decoders?: unknown };
  if (type === "ByteFallback") return true;
  return type === "Sequence" && Array.isArray(decoders) && decoders.some(hasByteFallbackDecoder);
}

let unicodeToByte: Map<string, number> | null = null;
function byteOfCharacter(character: string): number | undefined {
  unicodeToByte ??= new Map(byteToUnicode().map((character, byte) => [character, byte]));
  return unicodeToByte.get(character);
}

/**
 * The template's raise_exception(...) is renamed to this before rendering:
 * @huggingface/jinja declares its own raise_exception (a plain Error, like any other
 * failure) and refuses a second declaration, and ours throws ChatTemplateError.
 */
const RAISE_EXCEPTION = "__ctxr_raise_exception";

/** Renames every Identifier node named from in a parsed template. */
function renameIdentifier(node: unknown, from: string, to: string, seen = new WeakSet<object>()): void {
  if (typeof node !== "object" || node === null || seen.has(node)) return;
  seen.add(node);
  const record = node as { type?: unknown; value?: unknown };
  if (record.type === "Identifier" && record.value === from) record.value = to;
  for (const value of Object.values(node)) renameIdentifier(value, from, to, seen);
}

export async function loadModelTokenizer(dir: string): Promise<ModelTokenizer> {
  const [tokenizerJson, config, generationConfig] = await Promise.all([
    readJsonObject(dir, "tokenizer.json", true),
    readJsonObject(dir, "tokenizer_config.json", true),
    readJsonObject(dir, "generation_config.json", false),
  ]);
  return modelTokenizerFromJson({
    dir,
    tokenizerJson,
    config,
    generationConfig,
    chatTemplate: await findChatTemplate(dir, config),
    names: { tokenizer: join(dir, "tokenizer.json"), config: join(dir, "tokenizer_config.json"), generation: join(dir, "generation_config.json") },
  });
}

/** A tokenizer's parts as in-memory JSON (what a model folder's files hold, or what a GGUF file's metadata converts to). */
export interface ModelTokenizerParts {
  /** Where the model came from (ModelTokenizer.dir): a model folder, or a GGUF file. */
  dir: string;
  /** tokenizer.json's object. */
  tokenizerJson: Record<string, unknown>;
  /** tokenizer_config.json's object (special tokens, decoding options). */
  config: Record<string, unknown>;
  /** generation_config.json's object (eos_token_id: a number or a list), or null. */
  generationConfig: Record<string, unknown> | null;
  /** The chat template's text and where it came from, or null. */
  chatTemplate: { text: string; file: string } | null;
  /** What error messages call each part (file paths, or GGUF keys). */
  names: { tokenizer: string; config: string; generation: string };
  /** A rewrite of every text before it is tokenized (a GGUF file's llama.cpp-only token attributes). */
  beforeEncode?: (text: string) => string;
}

/** A ModelTokenizer from in-memory parts; errors name the parts by `names`. */
export function modelTokenizerFromJson(parts: ModelTokenizerParts): ModelTokenizer {
  const { dir, tokenizerJson, config, generationConfig } = parts;
  const tokenizerPath = parts.names.tokenizer;
  const configPath = parts.names.config;
  const generationPath = parts.names.generation;
  if (typeof tokenizerJson.model !== "object" || tokenizerJson.model === null) {
    throw new ModelTokenizerError(`${tokenizerPath} has no model section; is it a Hugging Face tokenizer.json?`);
  }

  let tokenizer: Tokenizer;
  try {
    tokenizer = new Tokenizer(tokenizerJson, config);
  } catch (error) {
    throw new ModelTokenizerError(`cannot load ${tokenizerPath}: ${(error as Error).message}`);
  }

  const specialTokens: Record<string, string> = {};
  for (const key of SPECIAL_TOKEN_KEYS) {
    const content = specialTokenContent(config, key, configPath);
    if (content !== null) specialTokens[key] = content;
  }
  let additionalSpecialTokens: string[] | null = null;
  if (Array.isArray(config.additional_special_tokens)) {
    const list = Object.fromEntries(config.additional_special_tokens.map((entry, index) => [`additional_special_tokens[${index}]`, entry]));
    additionalSpecialTokens = Object.keys(list).map((key) => {
      const content = specialTokenContent(list, key, configPath);
      if (content === null) throw new ModelTokenizerError(`${configPath}: ${key} must be a string or an object with a string content`);
      return content;
    });
  }

  const idOf = (key: string): number | null => {
    const content = specialTokens[key];
    if (content === undefined) return null;
    const id = tokenizer.token_to_id(content);
    if (id === undefined) throw new ModelTokenizerError(`${configPath}: ${key} ${JSON.stringify(content)} is not a token of ${tokenizerPath}`);
    return id;
  };
  const bosTokenId = idOf("bos_token");
  const eosTokenIds: number[] = [];
  const configEos = idOf("eos_token");
  if (configEos !== null) eosTokenIds.push(configEos);
  for (const id of generationEosIds(generationConfig, generationPath)) {
    if (!eosTokenIds.includes(id)) eosTokenIds.push(id);
  }

  const vocab = tokenizer.get_vocab(true);
  let vocabSize = 0;
  for (const id of vocab.values()) vocabSize = Math.max(vocabSize, id + 1);
  const added = tokenizer.get_added_tokens_decoder();
  const specialIds = new Set<number>();
  for (const [id, token] of added) if (token.special) specialIds.add(id);

  const templateSource = parts.chatTemplate;
  let template: Template | null = null;
  let templateError: ModelTokenizerError | null = null;
  if (templateSource !== null) {
    try {
      template = new Template(templateSource.text);
      renameIdentifier(template.parsed, "raise_exception", RAISE_EXCEPTION);
    } catch (error) {
      templateError = new ModelTokenizerError(`the chat template in ${templateSource.file} does not parse: ${(error as Error).message}`);
    }
  }

  const byteLevel = hasByteLevelDecoder(tokenizerJson.decoder);
  const byteFallback = hasByteFallbackDecoder(tokenizerJson.decoder);
  const utf8 = new TextEncoder();

  const decode = (ids: readonly number[], options: DecodeOptions = {}): string => {
    if (ids.length === 0) return "";
    return tokenizer.decode(ids as number[], { skip_special_tokens: options.skipSpecialTokens ?? false });
  };
  const beforeEncode = parts.beforeEncode ?? ((text: string) => text);
  const encode = (text: string): number[] => {
    const prepared = beforeEncode(text);
    return prepared.length === 0 ? [] : tokenizer.encode(prepared, { add_special_tokens: false }).ids;
  };
  const boundary = new AddedTokenBoundary(
    [...added.values()].map((token) => ({ content: token.content, lstrip: token.lstrip, normalized: token.normalized })),
    tokenizerJson.normalizer !== null && tokenizerJson.normalizer !== undefined,
  );

  return {
    dir,
    encode,
    promptIds: encode,
    decode,
    hasChatTemplate: template !== null,
    chatTemplateSource: templateSource?.text ?? null,
    eosTokenIds,
    bosTokenId,
    vocabSize,
    applyChatTemplate(messages, options = {}) {
      if (templateError !== null) throw templateError;
      if (template === null) {
        throw new ModelTokenizerError(
          `${dir} has no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja or chat_template.json); use plain completions`,
        );
      }
      const context: Record<string, unknown> = {
        ...specialTokens,
        ...(additionalSpecialTokens !== null ? { additional_special_tokens: additionalSpecialTokens } : {}),
        [RAISE_EXCEPTION]: (message: unknown) => {
          throw new ChatTemplateError(String(message));
        },
        ...options.templateKwargs,
        ...(options.tools !== undefined && options.tools.length > 0 ? { tools: options.tools } : {}),
        messages: messages.map((message) => ({
          role: message.role,
          content: message.content,
          ...(message.tool_calls !== undefined ? { tool_calls: message.tool_calls } : {}),
          ...(message.tool_call_id !== undefined ? { tool_call_id: message.tool_call_id } : {}),
          ...(message.name !== undefined ? { name: message.name } : {}),
          ...(message.reasoning_content !== undefined ? { reasoning_content: message.reasoning_content, thinking: message.reasoning_content } : {}),
        })),
        add_generation_prompt: options.addGenerationPrompt ?? true,
      };
      try {
        return template.render(context);
      } catch (error) {
        if (error instanceof ChatTemplateError) throw error;
        throw new ModelTokenizerError(`the chat template in ${templateSource!.file} failed: ${(error as Error).message}`);
      }
    },
    tokenText(id) {
      return decode([id]);
    },
    tokenBytes(id) {
      const token = tokenizer.id_to_token(id);
      if (token === undefined) return [];
      if (!added.has(id)) {
        if (byteLevel) {
          const bytes: number[] = [];
          for (const character of token) {
            const byte = byteOfCharacter(character);
            if (byte === undefined) return [...utf8.encode(decode([id]))];
            bytes.push(byte);
          }
          return bytes;
        }
        if (byteFallback) {
          const fallback = /^<0x([0-9A-Fa-f]{2})>$/.exec(token);
          if (fallback) return [parseInt(fallback[1]!, 16)];
          // A piece's own text, ▁ standing for a space: decoding it alone would strip that space
          // (the decoder drops the text's leading one).
          return [...utf8.encode(token.replaceAll("\u2581", " "))];
        }
      }
      return [...utf8.encode(decode([id]))];
    },
    isSpecialToken(id) {
      return specialIds.has(id);
    },
    splitsAt: (text, at) => boundary.splitsAt(text, at),
    exactText(ids) {
      if (ids.some((id) => !Number.isSafeInteger(id) || id < 0 || tokenizer.id_to_token(id) === undefined)) return null;
      const text = ids.length === 0 ? "" : tokenizer.decode(ids as number[], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
      return text.includes("\uFFFD") ? null : text;
    },
    vocabType: byteLevel ? "byte_level" : byteFallback ? "byte_fallback" : "raw",
    prependsSpace: prependsSpaceMark(tokenizerJson.normalizer) || prependsSpaceMark(tokenizerJson.pre_tokenizer),
    encodedVocab() {
      const strings: string[] = new Array(vocabSize).fill("");
      for (const [token, id] of vocab) strings[id] = token;
      return strings;
    },
  };
}
