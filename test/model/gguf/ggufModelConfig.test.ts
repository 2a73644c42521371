import { describe, expect, test } from "bun:test";
import { ggufModelConfig, type GgufTensorShape } from "../../../src/model/gguf/ggufModelConfig.ts";
import { llamaConfigFromJson } from "../../../src/model/referenceLlama.ts";

function llamaMetadata(arch = "llama"): Map<string, unknown> {
  return new Map<string, unknown>([
    ["general.architecture", arch],
    [`${arch}.context_length`, 8192],
    [`${arch}.embedding_length`, 128],
    [`${arch}.block_count`, 4],
    [`${arch}.feed_forward_length`, 256],
    [`${arch}.attention.head_count`, 4],
    [`${arch}.attention.head_count_kv`, 2],
    [`${arch}.attention.layer_norm_rms_epsilon`, 1e-6],
    [`${arch}.rope.freq_base`, 500000],
    ["tokenizer.ggml.tokens", new Array(259).fill(0).map((_, i) => `t${i}`)],
  ]);
}

const TENSORS: GgufTensorShape[] = [
  { name: "token_embd.weight", dims: [128, 259] },
  { name: "output.weight", dims: [128, 259] },
];

describe("ggufModelConfig", () => {
  test("llama: every field, as config.json names them, and referenceLlama reads the config", () => {
    const config = ggufModelConfig(llamaMetadata(), TENSORS);
    expect(config).toMatchObject({ architecture: "llama", contextLength: 8192, vocabSize: 259, hidden: 128, intermediate: 256, layers: 4, heads: 4, kvHeads: 2, headDim: 32, rmsNormEps: 1e-6, ropeTheta: 500000, ropeScaling: null, tieWordEmbeddings: false, attentionBias: false });
    expect(config.configJson).toMatchObject({ architectures: ["LlamaForCausalLM"], model_type: "llama", max_position_embeddings: 8192, num_key_value_heads: 2, head_dim: 32, vocab_size: 259 });
    const reference = llamaConfigFromJson(config.configJson);
    expect(reference).toMatchObject({ hidden: 128, heads: 4, kvHeads: 2, headDim: 32, layers: 4, vocab: 259, ropeTheta: 500000, tieWordEmbeddings: false });
  });

  test("phi3: Phi3ForCausalLM, partial rotary as partial_rotary_factor, LongRoPE from its factor tensors; errors", () => {
    const metadata = llamaMetadata("phi3");
    metadata.set("phi3.rope.dimension_count", 24);
    metadata.set("phi3.rope.scaling.original_context_length", 4096);
    metadata.set("phi3.rope.scaling.attn_factor", 1.19);
    const factors = [
      { name: "rope_factors_long.weight", dims: [12] },
      { name: "rope_factors_short.weight", dims: [12] },
    ];
    const config = ggufModelConfig(metadata, [TENSORS[0]!, ...factors]);
    expect(config).toMatchObject({ architecture: "phi3", headDim: 32, tieWordEmbeddings: true, ropeScaling: { rope_type: "longrope", original_max_position_embeddings: 4096, attention_factor: 1.19 } });
    expect(config.configJson).toMatchObject({ architectures: ["Phi3ForCausalLM"], model_type: "phi3", partial_rotary_factor: 0.75 });
    expect(ggufModelConfig(llamaMetadata("phi3"), TENSORS).ropeScaling).toBeNull();
    expect(() => ggufModelConfig(metadata, [TENSORS[0]!, factors[0]!])).toThrow(/rope_factors_long\.weight and rope_factors_short\.weight come together/);
    metadata.set("phi3.rope.dimension_count", 23);
    expect(() => ggufModelConfig(metadata, TENSORS)).toThrow(/phi3\.rope\.dimension_count is 23/);
  });

  test("defaults: kv heads = heads, head_dim = hidden / heads, eps 1e-5, base 10000; tied output without output.weight; vocab from token_embd", () => {
    const metadata = llamaMetadata();
    for (const key of ["llama.attention.head_count_kv", "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base", "tokenizer.ggml.tokens"]) metadata.delete(key);
    const config = ggufModelConfig(metadata, [{ name: "token_embd.weight", dims: [128, 300] }]);
    expect(config).toMatchObject({ kvHeads: 4, headDim: 32, rmsNormEps: 1e-5, ropeTheta: 10000, tieWordEmbeddings: true, vocabSize: 300 });
  });

  test("qwen2 (bias) and mistral; key_length gives head_dim; rope scaling linear and yarn; bigint values", () => {
    const qwen = llamaMetadata("qwen2");
    qwen.set("qwen2.attention.key_length", 64n);
    qwen.set("qwen2.rope.scaling.type", "yarn");
    qwen.set("qwen2.rope.scaling.factor", 4);
    qwen.set("qwen2.rope.scaling.original_context_length", 2048);
    const config = ggufModelConfig(qwen, [...TENSORS, { name: "blk.0.attn_q.bias", dims: [128] }]);
    expect(config).toMatchObject({ architecture: "qwen2", headDim: 64, attentionBias: true, ropeScaling: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 2048 } });
    expect(config.configJson.architectures).toEqual(["Qwen2ForCausalLM"]);
    const mistral = llamaMetadata("mistral");
    mistral.set("mistral.rope.scaling.type", "linear");
    mistral.set("mistral.rope.scaling.factor", 2);
    expect(ggufModelConfig(mistral, TENSORS)).toMatchObject({ architecture: "mistral", ropeScaling: { rope_type: "linear", factor: 2 } });
  });

  test("qwen3: key_length gives head_dim apart from hidden / heads; Qwen3ForCausalLM, no bias", () => {
    const qwen3 = llamaMetadata("qwen3");
    qwen3.set("qwen3.attention.key_length", 96);
    qwen3.set("qwen3.attention.value_length", 96);
    const config = ggufModelConfig(qwen3, TENSORS);
    expect(config).toMatchObject({ architecture: "qwen3", hidden: 128, heads: 4, headDim: 96, attentionBias: false });
    expect(config.configJson).toMatchObject({ architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", head_dim: 96 });
    expect(llamaConfigFromJson(config.configJson).headDim).toBe(96);
  });

  const errors: [string, (m: Map<string, unknown>) => void, RegExp][] = [
    ["other architecture", (m) => m.set("general.architecture", "gemma2"), /general\.architecture is "gemma2"; ctxr runs llama, qwen2, qwen3, mistral/],
    ["no architecture", (m) => m.delete("general.architecture"), /general\.architecture is missing/],
    ["missing context length", (m) => m.delete("llama.context_length"), /llama\.context_length is missing/],
    ["zero layers", (m) => m.set("llama.block_count", 0), /llama\.block_count must be an integer ≥ 1, got number 0/],
    ["heads an array", (m) => m.set("llama.attention.head_count", [4, 4]), /llama\.attention\.head_count must be an integer/],
    ["kv heads not dividing", (m) => m.set("llama.attention.head_count_kv", 3), /llama\.attention\.head_count \(4\) is not a multiple of llama\.attention\.head_count_kv \(3\)/],
    ["hidden not a multiple of heads", (m) => m.set("llama.embedding_length", 130), /llama\.embedding_length \(130\) is not a multiple of llama\.attention\.head_count/],
    ["value length", (m) => m.set("llama.attention.value_length", 16), /llama\.attention\.value_length is 16/],
    ["partial rotary", (m) => m.set("llama.rope.dimension_count", 16), /llama\.rope\.dimension_count is 16/],
    ["rope scaling type", (m) => m.set("llama.rope.scaling.type", "longrope"), /llama\.rope\.scaling\.type is "longrope"/],
    ["rope scaling factor", (m) => m.set("llama.rope.scaling.type", "linear"), /llama\.rope\.scaling\.factor must be a positive number/],
    ["eps a string", (m) => m.set("llama.attention.layer_norm_rms_epsilon", "x"), /llama\.attention\.layer_norm_rms_epsilon must be a finite number/],
  ];
  for (const [name, edit, message] of errors) {
    test(`error: ${name}`, () => {
      const metadata = llamaMetadata();
      edit(metadata);
      expect(() => ggufModelConfig(metadata, TENSORS)).toThrow(message);
    });
  }
});
