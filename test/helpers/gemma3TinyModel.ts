/**
 * A tiny random Gemma 3, written twice from the same weights: as a GGUF file the way llama.cpp's
 * converter writes it (conversion/gemma.py: llama.cpp tensor names, every norm weight stored as
 * 1 + w, no output.weight, a SentencePiece "llama" vocabulary with Gemma's special tokens and
 * chat template) and as a Hugging Face Gemma3ForCausalLM folder (config.json + model.safetensors,
 * norm weights w: Gemma3RMSNorm multiplies by 1 + w). Both must give the same logits.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ggufArray, ggufBool, ggufFloat32, type GgufMetadata, ggufString, ggufUint32 } from "../../src/model/gguf/ggufMetadata.ts";
import { GGML_TYPE } from "../../src/model/gguf/ggufTypes.ts";
import { encodeGguf, type GgufTensorToWrite } from "../../src/model/gguf/ggufWriter.ts";
import { NormalRandom } from "../../src/model/normalRandom.ts";
import { encodeSafetensors, type TensorData } from "../../src/model/safetensors.ts";

export interface TinyGemma3Options {
  hidden?: number;
  heads?: number;
  kvHeads?: number;
  headDim?: number;
  layers?: number;
  ffn?: number;
  window?: number;
  /** GGUF's attention.sliding_window_pattern: a period or one bool per layer (absent: llama.cpp's default 6). */
  pattern?: number | boolean[];
  seed?: number;
  /** Positions the model takes (default 4096). */
  contextLength?: number;
}

/** Gemma 3's chat template, shortened (the system message goes before the first user turn; the assistant is "model"). */
export const GEMMA3_CHAT_TEMPLATE =
  "{{ bos_token }}" +
  "{%- if messages[0]['role'] == 'system' -%}" +
  "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}" +
  "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}" +
  "{%- for message in loop_messages -%}" +
  "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}" +
  "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}" +
  "{%- endfor -%}" +
  "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}";

const SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"];
const PIECES = ["▁", "e", "t", "a", "o", "h", "n", "s", "r", "l", "▁t", "▁a", "he", "▁the", "in", "er", "on", "▁s", "at", "en", "\n"];

/** The vocabulary: Gemma's specials (pad 0, eos 1, bos 2, unk 3), the 256 byte tokens, some pieces. */
export function gemma3Vocabulary(): { tokens: string[]; scores: number[]; types: number[] } {
  const tokens = [...SPECIALS];
  const types = [3, 3, 3, 2, 3, 3];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(6);
  }
  for (const piece of PIECES) {
    tokens.push(piece);
    types.push(1);
  }
  const scores = tokens.map((_, i) => (types[i] === 1 ? -i : 0));
  return { tokens, scores, types };
}

export interface TinyGemma3 {
  gguf: string;
  folder: string;
  vocab: number;
  layers: number;
  windows: number[];
}

export function writeTinyGemma3(dir: string, options: TinyGemma3Options = {}): TinyGemma3 {
  const hidden = options.hidden ?? 64, heads = options.heads ?? 2, kvHeads = options.kvHeads ?? 1, headDim = options.headDim ?? 48;
  const layers = options.layers ?? 7, ffn = options.ffn ?? 128, window = options.window ?? 8;
  const { tokens, scores, types } = gemma3Vocabulary();
  const vocab = tokens.length;
  const random = new NormalRandom(options.seed ?? 3, "gemma3");
  const local = Array.isArray(options.pattern)
    ? options.pattern
    : Array.from({ length: layers }, (_, l) => {
        const period = typeof options.pattern === "number" ? options.pattern : 6;
        return period === 0 || l % period < period - 1;
      });

  const hf: TensorData[] = [];
  const gguf: GgufTensorToWrite[] = [];
  const floats = (values: Float32Array) => new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  const matrix = (hfName: string, ggufName: string, rows: number, cols: number) => {
    const values = new Float32Array(rows * cols).map(() => random.next() / Math.sqrt(cols));
    hf.push({ name: hfName, dtype: "F32", shape: [rows, cols], data: floats(values) });
    gguf.push({ name: ggufName, type: GGML_TYPE.F32, dims: [cols, rows], data: () => floats(values) });
  };
  const norm = (hfName: string, ggufName: string, n: number) => {
    const w = new Float32Array(n).map(() => 0.1 * random.next());
    const stored = w.map((x) => x + 1);
    hf.push({ name: hfName, dtype: "F32", shape: [n], data: floats(w) });
    gguf.push({ name: ggufName, type: GGML_TYPE.F32, dims: [n], data: () => floats(stored) });
  };
  matrix("model.embed_tokens.weight", "token_embd.weight", vocab, hidden);
  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}.`, g = `blk.${l}.`;
    norm(`${p}input_layernorm.weight`, `${g}attn_norm.weight`, hidden);
    matrix(`${p}self_attn.q_proj.weight`, `${g}attn_q.weight`, heads * headDim, hidden);
    matrix(`${p}self_attn.k_proj.weight`, `${g}attn_k.weight`, kvHeads * headDim, hidden);
    matrix(`${p}self_attn.v_proj.weight`, `${g}attn_v.weight`, kvHeads * headDim, hidden);
    norm(`${p}self_attn.q_norm.weight`, `${g}attn_q_norm.weight`, headDim);
    norm(`${p}self_attn.k_norm.weight`, `${g}attn_k_norm.weight`, headDim);
    matrix(`${p}self_attn.o_proj.weight`, `${g}attn_output.weight`, hidden, heads * headDim);
    norm(`${p}post_attention_layernorm.weight`, `${g}post_attention_norm.weight`, hidden);
    norm(`${p}pre_feedforward_layernorm.weight`, `${g}ffn_norm.weight`, hidden);
    matrix(`${p}mlp.gate_proj.weight`, `${g}ffn_gate.weight`, ffn, hidden);
    matrix(`${p}mlp.up_proj.weight`, `${g}ffn_up.weight`, ffn, hidden);
    matrix(`${p}mlp.down_proj.weight`, `${g}ffn_down.weight`, hidden, ffn);
    norm(`${p}post_feedforward_layernorm.weight`, `${g}post_ffw_norm.weight`, hidden);
  }
  norm("model.norm.weight", "output_norm.weight", hidden);

  const metadata: GgufMetadata = new Map([
    ["general.architecture", ggufString("gemma3")],
    ["gemma3.context_length", ggufUint32(options.contextLength ?? 4096)],
    ["gemma3.embedding_length", ggufUint32(hidden)],
    ["gemma3.block_count", ggufUint32(layers)],
    ["gemma3.feed_forward_length", ggufUint32(ffn)],
    ["gemma3.attention.head_count", ggufUint32(heads)],
    ["gemma3.attention.head_count_kv", ggufUint32(kvHeads)],
    ["gemma3.attention.key_length", ggufUint32(headDim)],
    ["gemma3.attention.value_length", ggufUint32(headDim)],
    ["gemma3.attention.layer_norm_rms_epsilon", ggufFloat32(1e-6)],
    ["gemma3.rope.freq_base", ggufFloat32(1_000_000)],
    ["gemma3.attention.sliding_window", ggufUint32(window)],
    ["tokenizer.ggml.model", ggufString("llama")],
    ["tokenizer.ggml.tokens", ggufArray("string", tokens)],
    ["tokenizer.ggml.scores", ggufArray("float32", scores)],
    ["tokenizer.ggml.token_type", ggufArray("int32", types)],
    ["tokenizer.ggml.bos_token_id", ggufUint32(2)],
    ["tokenizer.ggml.eos_token_id", ggufUint32(1)],
    ["tokenizer.ggml.unknown_token_id", ggufUint32(3)],
    ["tokenizer.ggml.padding_token_id", ggufUint32(0)],
    ["tokenizer.ggml.add_bos_token", ggufBool(true)],
    ["tokenizer.ggml.add_space_prefix", ggufBool(false)],
    ["tokenizer.chat_template", ggufString(GEMMA3_CHAT_TEMPLATE)],
  ]);
  if (Array.isArray(options.pattern)) metadata.set("gemma3.attention.sliding_window_pattern", ggufArray("bool", options.pattern));
  else if (options.pattern !== undefined) metadata.set("gemma3.attention.sliding_window_pattern", ggufUint32(options.pattern));

  mkdirSync(dir, { recursive: true });
  const ggufPath = join(dir, "gemma3.gguf");
  writeFileSync(ggufPath, encodeGguf(metadata, gguf));
  const folder = join(dir, "hf");
  mkdirSync(folder, { recursive: true });
  const config = {
    architectures: ["Gemma3ForCausalLM"],
    model_type: "gemma3_text",
    vocab_size: vocab,
    hidden_size: hidden,
    intermediate_size: ffn,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    head_dim: headDim,
    hidden_activation: "gelu_pytorch_tanh",
    max_position_embeddings: options.contextLength ?? 4096,
    rms_norm_eps: 1e-6,
    rope_theta: 1_000_000,
    rope_local_base_freq: 10000,
    query_pre_attn_scalar: headDim,
    sliding_window: window,
    layer_types: local.map((isLocal) => (isLocal ? "sliding_attention" : "full_attention")),
    final_logit_softcapping: null,
    attn_logit_softcapping: null,
    tie_word_embeddings: true,
  };
  writeFileSync(join(folder, "config.json"), JSON.stringify(config, null, 2));
  writeFileSync(join(folder, "model.safetensors"), encodeSafetensors(hf));
  return { gguf: ggufPath, folder, vocab, layers, windows: local.map((isLocal) => (isLocal ? window : 0)) };
}
