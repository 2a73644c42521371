/**
 * A GGUF file's model hyperparameters as the Hugging Face config.json fields the TypeScript
 * side uses (and referenceLlama.ts's llamaConfigFromJson reads): architecture, context length
 * (max_position_embeddings, the server's max_model_len), vocabulary, hidden size, layers,
 * heads, kv heads, head_dim, norms, rope base and scaling, tied output.
 *
 * Keys (ARCH = `general.architecture`: llama, qwen2, qwen3, qwen3moe, mistral, gemma3, phi3 or
 * gpt-oss; gemma3's own keys in ggufGemma3Config.ts, gpt-oss's in ggufGptOssConfig.ts, the
 * expert keys of qwen3moe in ggufMoeConfig.ts):
 *   ARCH.context_length, ARCH.embedding_length, ARCH.block_count, ARCH.feed_forward_length,
 *   ARCH.attention.head_count, ARCH.attention.head_count_kv (default: head_count),
 *   ARCH.attention.key_length / value_length (default embedding_length / head_count),
 *   ARCH.attention.layer_norm_rms_epsilon (default 1e-5), ARCH.rope.freq_base (default 10000),
 *   ARCH.rope.dimension_count (must be head_dim, except phi3: Phi-4-mini rotates 3/4 of a head),
 *   ARCH.rope.scaling.type / .factor / .original_context_length, ARCH.vocab_size (default:
 *   the length of tokenizer.ggml.tokens, else token_embd.weight's rows).
 * The output is tied to the embedding when there is no output.weight tensor. A phi3 file with
 * rope_factors_long.weight / rope_factors_short.weight tensors has LongRoPE scaling (the factors
 * stay in the tensors; the runner reads them) switching at ARCH.rope.scaling.original_context_length.
 *
 * Pure: metadata and tensor infos in; a GgufMetadataError naming the key when one is
 * missing or invalid, or naming general.architecture when it is not one we run.
 */
import { gemma3ConfigFields } from "./ggufGemma3Config.ts";
import { gptOssConfigFields, gptOssExpertWidth } from "./ggufGptOssConfig.ts";
import { moeConfigFields } from "./ggufMoeConfig.ts";
import { GgufMetadataError, optionalInteger, optionalNumber, optionalString, optionalStringArray, requiredInteger, requiredString, type GgufMetadataLike } from "./ggufMetadataValues.ts";

export const GGUF_ARCHITECTURES = ["llama", "qwen2", "qwen3", "mistral", "gemma3", "phi3", "qwen3moe", "gpt-oss"] as const;
export type GgufArchitecture = (typeof GGUF_ARCHITECTURES)[number];

const HF_ARCHITECTURE: Record<GgufArchitecture, { architectures: string; modelType: string }> = {
  llama: { architectures: "LlamaForCausalLM", modelType: "llama" },
  qwen2: { architectures: "Qwen2ForCausalLM", modelType: "qwen2" },
  qwen3: { architectures: "Qwen3ForCausalLM", modelType: "qwen3" },
  qwen3moe: { architectures: "Qwen3MoeForCausalLM", modelType: "qwen3_moe" },
  mistral: { architectures: "MistralForCausalLM", modelType: "mistral" },
  gemma3: { architectures: "Gemma3ForCausalLM", modelType: "gemma3_text" },
  phi3: { architectures: "Phi3ForCausalLM", modelType: "phi3" },
  "gpt-oss": { architectures: "GptOssForCausalLM", modelType: "gpt_oss" },
};

export interface GgufModelConfig {
  architecture: GgufArchitecture;
  /** Longest sequence the model was trained for (max_position_embeddings; the server's max_model_len). */
  contextLength: number;
  vocabSize: number;
  hidden: number;
  intermediate: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  /** config.json's rope_scaling (null: none). */
  ropeScaling: Record<string, unknown> | null;
  tieWordEmbeddings: boolean;
  /** Qwen2's q/k/v biases (blk.0.attn_q.bias present). */
  attentionBias: boolean;
  /** The config.json these fields make. */
  configJson: Record<string, unknown>;
}

/** What the config needs of a tensor info. */
export interface GgufTensorShape {
  name: string;
  dims: readonly number[];
}

function positive(metadata: GgufMetadataLike, key: string): number {
  return requiredInteger(metadata, key, 1);
}

function ropeScaling(metadata: GgufMetadataLike, arch: string, contextLength: number): Record<string, unknown> | null {
  const typeKey = `${arch}.rope.scaling.type`;
  const type = optionalString(metadata, typeKey) ?? "none";
  const factorKey = `${arch}.rope.scaling.factor`;
  const factor = optionalNumber(metadata, factorKey);
  if (type === "none") return null;
  if (type !== "linear" && type !== "yarn") throw new GgufMetadataError(`GGUF metadata key ${typeKey} is ${JSON.stringify(type)}; ctxr supports none, linear and yarn`);
  if (factor === undefined || factor <= 0) throw new GgufMetadataError(`GGUF metadata key ${factorKey} must be a positive number for ${typeKey} ${type}`);
  if (type === "linear") return { rope_type: "linear", factor };
  const original = optionalInteger(metadata, `${arch}.rope.scaling.original_context_length`, 1) ?? Math.round(contextLength / factor);
  return { rope_type: "yarn", factor, original_max_position_embeddings: original };
}

/** Phi-3's LongRoPE as config.json names it, when the file has the factor tensors (else null). */
function phi3RopeScaling(metadata: GgufMetadataLike, byName: ReadonlyMap<string, GgufTensorShape>, contextLength: number): Record<string, unknown> | null {
  const long = byName.has("rope_factors_long.weight");
  if (long !== byName.has("rope_factors_short.weight")) throw new GgufMetadataError("GGUF tensors rope_factors_long.weight and rope_factors_short.weight come together; the file has one");
  if (!long) return null;
  const original = optionalInteger(metadata, "phi3.rope.scaling.original_context_length", 1) ?? contextLength;
  const attentionFactor = optionalNumber(metadata, "phi3.rope.scaling.attn_factor") ?? 1;
  return { rope_type: "longrope", original_max_position_embeddings: original, attention_factor: attentionFactor };
}

/** The model config of a GGUF file's metadata and tensor infos. */
export function ggufModelConfig(metadata: GgufMetadataLike, tensors: readonly GgufTensorShape[]): GgufModelConfig {
  const archKey = "general.architecture";
  const arch = requiredString(metadata, archKey);
  if (!(GGUF_ARCHITECTURES as readonly string[]).includes(arch)) {
    throw new GgufMetadataError(`GGUF metadata key ${archKey} is ${JSON.stringify(arch)}; ctxr runs ${GGUF_ARCHITECTURES.join(", ")}`);
  }
  const architecture = arch as GgufArchitecture;
  const contextLength = positive(metadata, `${arch}.context_length`);
  const hidden = positive(metadata, `${arch}.embedding_length`);
  const layers = positive(metadata, `${arch}.block_count`);
  // gpt-oss has no dense FFN: its experts' width stands in when feed_forward_length is absent.
  const intermediate =
    architecture === "gpt-oss" && !metadata.has(`${arch}.feed_forward_length`) ? gptOssExpertWidth(metadata) : positive(metadata, `${arch}.feed_forward_length`);
  const headsKey = `${arch}.attention.head_count`;
  const heads = positive(metadata, headsKey);
  const kvHeadsKey = `${arch}.attention.head_count_kv`;
  const kvHeads = optionalInteger(metadata, kvHeadsKey, 1) ?? heads;
  if (heads % kvHeads !== 0) throw new GgufMetadataError(`GGUF metadata key ${headsKey} (${heads}) is not a multiple of ${kvHeadsKey} (${kvHeads})`);
  const keyLengthKey = `${arch}.attention.key_length`;
  const headDim = optionalInteger(metadata, keyLengthKey, 1) ?? hidden / heads;
  if (!Number.isInteger(headDim)) throw new GgufMetadataError(`GGUF metadata key ${arch}.embedding_length (${hidden}) is not a multiple of ${headsKey} (${heads}); give ${keyLengthKey}`);
  if (headDim % 2 !== 0) throw new GgufMetadataError(`GGUF metadata key ${keyLengthKey}: head_dim ${headDim} must be even (rotary embedding)`);
  const valueLengthKey = `${arch}.attention.value_length`;
  const valueLength = optionalInteger(metadata, valueLengthKey, 1);
  if (valueLength !== undefined && valueLength !== headDim) throw new GgufMetadataError(`GGUF metadata key ${valueLengthKey} is ${valueLength}; ctxr needs it equal to the key length ${headDim}`);
  const ropeDimKey = `${arch}.rope.dimension_count`;
  const ropeDim = optionalInteger(metadata, ropeDimKey, 1);
  const partialRotary = architecture === "phi3" && ropeDim !== undefined && ropeDim < headDim && ropeDim % 2 === 0;
  if (ropeDim !== undefined && ropeDim !== headDim && !partialRotary) {
    throw new GgufMetadataError(`GGUF metadata key ${ropeDimKey} is ${ropeDim}; ctxr rotates the whole head (${headDim}), or for phi3 an even part of it`);
  }
  const rmsNormEps = optionalNumber(metadata, `${arch}.attention.layer_norm_rms_epsilon`) ?? 1e-5;
  const ropeTheta = optionalNumber(metadata, `${arch}.rope.freq_base`) ?? 10000;

  const byName = new Map(tensors.map((tensor) => [tensor.name, tensor]));
  const vocabKey = `${arch}.vocab_size`;
  const vocabSize =
    optionalInteger(metadata, vocabKey, 1) ?? optionalStringArray(metadata, "tokenizer.ggml.tokens")?.length ?? byName.get("token_embd.weight")?.dims[1];
  if (vocabSize === undefined || vocabSize < 1) throw new GgufMetadataError(`GGUF metadata key ${vocabKey} is missing, and there is no tokenizer.ggml.tokens or token_embd.weight to tell the vocabulary size`);
  const tieWordEmbeddings = tensors.length > 0 && !byName.has("output.weight");
  const attentionBias = byName.has("blk.0.attn_q.bias");
  const scaling = architecture === "phi3" ? phi3RopeScaling(metadata, byName, contextLength) : ropeScaling(metadata, arch, contextLength);
  const hf = HF_ARCHITECTURE[architecture];
  const configJson: Record<string, unknown> = {
    architectures: [hf.architectures],
    model_type: hf.modelType,
    vocab_size: vocabSize,
    hidden_size: hidden,
    intermediate_size: intermediate,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    head_dim: headDim,
    hidden_act: "silu",
    max_position_embeddings: contextLength,
    rms_norm_eps: rmsNormEps,
    rope_theta: ropeTheta,
    rope_scaling: scaling,
    tie_word_embeddings: tieWordEmbeddings,
    attention_bias: attentionBias,
  };
  if (architecture === "gemma3") {
    const fields = gemma3ConfigFields(metadata, { hidden, heads, headDim, layers });
    for (const [key, value] of Object.entries(fields)) {
      if (value === undefined) delete configJson[key];
      else configJson[key] = value;
    }
  }
  if (architecture === "gpt-oss") Object.assign(configJson, gptOssConfigFields(metadata, layers, scaling));
  if (architecture === "qwen3moe") Object.assign(configJson, moeConfigFields(metadata, arch, intermediate));
  if (partialRotary) configJson.partial_rotary_factor = ropeDim! / headDim;
  return { architecture, contextLength, vocabSize, hidden, intermediate, layers, heads, kvHeads, headDim, rmsNormEps, ropeTheta, ropeScaling: scaling, tieWordEmbeddings, attentionBias, configJson };
}
