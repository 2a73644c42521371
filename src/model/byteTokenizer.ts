/**
 * A byte-level tokenizer in Hugging Face's tokenizer.json form: token b (0..255) is
 * the byte b (written as GPT-2's printable byte-to-unicode character, as every
 * byte-level BPE vocabulary does), then the special tokens <s>, </s> and <pad>.
 * It is a BPE model without merges, so every UTF-8 byte of a text becomes one
 * token; encoding adds <s> in front (TemplateProcessing), as Llama's tokenizers do.
 * Loads in @huggingface/tokenizers and in the Rust tokenizers library alike.
 */

export const BOS_TOKEN = "<s>";
export const EOS_TOKEN = "</s>";
export const PAD_TOKEN = "<pad>";
export const BOS_TOKEN_ID = 256;
export const EOS_TOKEN_ID = 257;
export const PAD_TOKEN_ID = 258;
/** Tokens the tokenizer defines (a model's vocab_size may be larger: padding rows). */
export const BYTE_TOKENIZER_VOCAB = 259;

/**
 * A Llama-2-style chat template (Jinja, as in tokenizer_config.json): an optional
 * system message in <<SYS>> markers, user turns in [INST] ... [/INST], assistant
 * turns followed by </s>. The generation prompt is the open turn after [/INST].
 */
export const CHAT_TEMPLATE =
  "{{ bos_token }}" +
  "{% for message in messages %}" +
  "{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}" +
  "{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}" +
  "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}" +
  "{% else %}{{ raise_exception('Only system, user and assistant roles are supported') }}" +
  "{% endif %}" +
  "{% endfor %}";

/** GPT-2's bytes_to_unicode: the printable character that stands for each byte. */
export function byteToUnicode(): string[] {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const table: string[] = new Array(256);
  for (const b of printable) table[b] = String.fromCodePoint(b);
  let next = 0;
  for (let b = 0; b < 256; b++) {
    if (table[b] === undefined) table[b] = String.fromCodePoint(256 + next++);
  }
  return table;
}

function addedToken(id: number, content: string) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

const SPECIAL_TOKENS: [number, string][] = [
  [BOS_TOKEN_ID, BOS_TOKEN],
  [EOS_TOKEN_ID, EOS_TOKEN],
  [PAD_TOKEN_ID, PAD_TOKEN],
];

/** The tokenizer.json object. */
export function byteTokenizerJson(): Record<string, unknown> {
  const vocab: Record<string, number> = {};
  byteToUnicode().forEach((character, byte) => {
    vocab[character] = byte;
  });
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: SPECIAL_TOKENS.map(([id, content]) => addedToken(id, content)),
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: BOS_TOKEN, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [
        { SpecialToken: { id: BOS_TOKEN, type_id: 0 } },
        { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: BOS_TOKEN, type_id: 1 } },
        { Sequence: { id: "B", type_id: 1 } },
      ],
      special_tokens: { [BOS_TOKEN]: { id: BOS_TOKEN, ids: [BOS_TOKEN_ID], tokens: [BOS_TOKEN] } },
    },
    decoder: byteLevel,
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
}

/** The tokenizer_config.json object. */
export function byteTokenizerConfig(modelMaxLength: number): Record<string, unknown> {
  const decoder: Record<string, unknown> = {};
  for (const [id, content] of SPECIAL_TOKENS) {
    decoder[String(id)] = { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
  }
  return {
    tokenizer_class: "PreTrainedTokenizerFast",
    bos_token: BOS_TOKEN,
    eos_token: EOS_TOKEN,
    pad_token: PAD_TOKEN,
    unk_token: null,
    add_bos_token: true,
    add_eos_token: false,
    clean_up_tokenization_spaces: false,
    model_max_length: modelMaxLength,
    added_tokens_decoder: decoder,
    chat_template: CHAT_TEMPLATE,
  };
}
