/**
 * A tiny random Qwen3-MoE GGUF file as llama.cpp's converter lays it out (LLM_ARCH_QWEN3MOE):
 * Qwen3's attention with per-head q/k norms, and in every layer a router blk.N.ffn_gate_inp and
 * the experts' gate, up and down matrices as 3-D tensors blk.N.ffn_{gate,up,down}_exps; a
 * byte-level BPE vocabulary with Qwen's chat special tokens, and Qwen3's own chat template
 * (scripts/oracle/templates/qwen3.jinja, with its <think> handling).
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { byteToUnicode } from "../../src/model/byteTokenizer.ts";
import { ggufArray, ggufBool, ggufFloat32, type GgufMetadata, ggufString, ggufUint32 } from "../../src/model/gguf/ggufMetadata.ts";
import { GGML_TYPE } from "../../src/model/gguf/ggufTypes.ts";
import { encodeGguf, type GgufTensorToWrite } from "../../src/model/gguf/ggufWriter.ts";
import { NormalRandom } from "../../src/model/normalRandom.ts";
import { REPO_ROOT } from "./cli.ts";

export interface TinyQwen3MoeOptions {
  hidden?: number;
  heads?: number;
  kvHeads?: number;
  headDim?: number;
  layers?: number;
  experts?: number;
  expertsUsed?: number;
  expertFfn?: number;
  seed?: number;
  /** uint32 metadata set after the consistent ones (hostile-file tests: "qwen3moe.expert_count", ...). */
  metadata?: Record<string, number>;
}

const MERGES = ["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s", "a t"];
const SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"];

export const QWEN3_CHAT_TEMPLATE = readFileSync(join(REPO_ROOT, "scripts", "oracle", "templates", "qwen3.jinja"), "utf8");

export function writeTinyQwen3Moe(dir: string, options: TinyQwen3MoeOptions = {}): { gguf: string; vocab: number } {
  const hidden = options.hidden ?? 64, heads = options.heads ?? 4, kvHeads = options.kvHeads ?? 2, headDim = options.headDim ?? 32;
  const layers = options.layers ?? 2, experts = options.experts ?? 8, used = options.expertsUsed ?? 2, ffn = options.expertFfn ?? 32;
  const tokens = [...byteToUnicode(), ...MERGES.map((m) => m.replace(" ", "")), ...SPECIAL];
  const types = tokens.map((_, i) => (i >= tokens.length - SPECIAL.length ? 3 : 1));
  const random = new NormalRandom(options.seed ?? 7, "qwen3moe");
  const tensors: GgufTensorToWrite[] = [];
  const floats = (values: Float32Array) => new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  /** dims as GGUF stores them (innermost first): [cols, rows] or [cols, rows, experts]. */
  const tensor = (name: string, dims: number[]) => {
    const count = dims.reduce((a, b) => a * b, 1);
    const values = dims.length === 1 ? new Float32Array(count).map(() => 1 + 0.1 * random.next()) : new Float32Array(count).map(() => random.next() / Math.sqrt(dims[0]!));
    tensors.push({ name, type: GGML_TYPE.F32, dims, data: () => floats(values) });
  };
  tensor("token_embd.weight", [hidden, tokens.length]);
  for (let l = 0; l < layers; l++) {
    const p = `blk.${l}.`;
    tensor(`${p}attn_norm.weight`, [hidden]);
    tensor(`${p}attn_q.weight`, [hidden, heads * headDim]);
    tensor(`${p}attn_q_norm.weight`, [headDim]);
    tensor(`${p}attn_k.weight`, [hidden, kvHeads * headDim]);
    tensor(`${p}attn_k_norm.weight`, [headDim]);
    tensor(`${p}attn_v.weight`, [hidden, kvHeads * headDim]);
    tensor(`${p}attn_output.weight`, [heads * headDim, hidden]);
    tensor(`${p}ffn_norm.weight`, [hidden]);
    tensor(`${p}ffn_gate_inp.weight`, [hidden, experts]);
    tensor(`${p}ffn_gate_exps.weight`, [hidden, ffn, experts]);
    tensor(`${p}ffn_up_exps.weight`, [hidden, ffn, experts]);
    tensor(`${p}ffn_down_exps.weight`, [ffn, hidden, experts]);
  }
  tensor("output_norm.weight", [hidden]);
  tensor("output.weight", [hidden, tokens.length]);
  const metadata: GgufMetadata = new Map([
    ["general.architecture", ggufString("qwen3moe")],
    ["qwen3moe.context_length", ggufUint32(4096)],
    ["qwen3moe.embedding_length", ggufUint32(hidden)],
    ["qwen3moe.block_count", ggufUint32(layers)],
    ["qwen3moe.feed_forward_length", ggufUint32(ffn * used)],
    ["qwen3moe.attention.head_count", ggufUint32(heads)],
    ["qwen3moe.attention.head_count_kv", ggufUint32(kvHeads)],
    ["qwen3moe.attention.key_length", ggufUint32(headDim)],
    ["qwen3moe.attention.value_length", ggufUint32(headDim)],
    ["qwen3moe.attention.layer_norm_rms_epsilon", ggufFloat32(1e-6)],
    ["qwen3moe.rope.freq_base", ggufFloat32(1_000_000)],
    ["qwen3moe.expert_count", ggufUint32(experts)],
    ["qwen3moe.expert_used_count", ggufUint32(used)],
    ["qwen3moe.expert_feed_forward_length", ggufUint32(ffn)],
    ["tokenizer.ggml.model", ggufString("gpt2")],
    ["tokenizer.ggml.pre", ggufString("qwen2")],
    ["tokenizer.ggml.tokens", ggufArray("string", tokens)],
    ["tokenizer.ggml.token_type", ggufArray("int32", types)],
    ["tokenizer.ggml.merges", ggufArray("string", MERGES)],
    ["tokenizer.ggml.bos_token_id", ggufUint32(tokens.indexOf("<|endoftext|>"))],
    ["tokenizer.ggml.eos_token_id", ggufUint32(tokens.indexOf("<|im_end|>"))],
    ["tokenizer.ggml.add_bos_token", ggufBool(false)],
    ["tokenizer.chat_template", ggufString(QWEN3_CHAT_TEMPLATE)],
  ]);
  for (const [key, value] of Object.entries(options.metadata ?? {})) metadata.set(key, ggufUint32(value));
  mkdirSync(dir, { recursive: true });
  const gguf = join(dir, "qwen3moe.gguf");
  writeFileSync(gguf, encodeGguf(metadata, tensors));
  return { gguf, vocab: tokens.length };
}
