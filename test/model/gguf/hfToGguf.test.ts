import { describe, expect, test } from "bun:test";
import { metadataNumber, metadataString } from "../../../src/model/gguf/ggufMetadata.ts";
import { hfModelMetadata, hfModelShape, hfRopeFactorTensors, hfTensorMapping, llama3RopeFactors, permuteQueryKeyRows } from "../../../src/model/gguf/hfToGguf.ts";
import { inverseFrequencies, llamaConfigFromJson } from "../../../src/model/referenceLlama.ts";
import { TINY_MODEL_DEFAULTS, tinyModelConfig } from "../../../src/model/tinyModel.ts";
import { GGML_TYPE } from "../../../src/model/gguf/ggufTypes.ts";
import { tensorTypeFor } from "../../../src/model/gguf/quantizeTypePlan.ts";

describe("Hugging Face to GGUF conventions", () => {
  test("q/k rows: within each head, new row 2i + h is old row h·d/2 + i; inverse undoes it", () => {
    // 2 heads of d = 4 rows, 1 column: rows 0..7
    const rows = Float32Array.from([0, 1, 2, 3, 4, 5, 6, 7]);
    expect([...permuteQueryKeyRows(rows, 8, 2)]).toEqual([0, 2, 1, 3, 4, 6, 5, 7]);
    const matrix = Float32Array.from({ length: 24 }, (_, i) => i); // 6 rows × 4 columns, 1 head
    const permuted = permuteQueryKeyRows(matrix, 6, 1);
    expect([...permuted.subarray(4, 8)]).toEqual([12, 13, 14, 15]); // new row 1 = old row 3
    expect(permuteQueryKeyRows(permuted, 6, 1, true)).toEqual(matrix);
    expect(() => permuteQueryKeyRows(matrix, 6, 2)).toThrow("cannot permute 6 rows over 2 heads");
  });

  test("metadata keys of llama from config.json", () => {
    const config = tinyModelConfig({ ...TINY_MODEL_DEFAULTS, hidden: 64, heads: 4, kvHeads: 2 });
    const m = hfModelMetadata(config, "tiny");
    expect(metadataString(m, "general.architecture")).toBe("llama");
    expect(metadataString(m, "general.name")).toBe("tiny");
    expect(metadataNumber(m, "llama.context_length")).toBe(8192);
    expect(metadataNumber(m, "llama.feed_forward_length")).toBe(128);
    expect(metadataNumber(m, "llama.attention.head_count")).toBe(4);
    expect(metadataNumber(m, "llama.attention.layer_norm_rms_epsilon")).toBeCloseTo(1e-5, 10);
    expect(metadataNumber(m, "llama.rope.freq_base")).toBe(10000);
    expect(metadataNumber(m, "llama.rope.dimension_count")).toBe(16);
    expect(m.has("llama.attention.key_length")).toBe(false);
    const linear = hfModelMetadata({ ...config, rope_scaling: { type: "linear", factor: 4 } }, "x");
    expect(metadataString(linear, "llama.rope.scaling.type")).toBe("linear");
    expect(metadataNumber(linear, "llama.rope.scaling.factor")).toBe(4);
    expect(() => hfModelMetadata({ ...config, rope_scaling: { rope_type: "longrope" } }, "x")).toThrow('rope_scaling type "longrope" is not supported');
    expect(() => hfModelMetadata({ ...config, architectures: ["GPT2LMHeadModel"], model_type: "gpt2" }, "x")).toThrow('architecture "GPT2LMHeadModel" is not supported');
    expect(() => hfModelMetadata({ ...config, hidden_size: 0 }, "x")).toThrow("hidden_size must be a positive integer");
  });

  test("llama3 rope factors divide the reference's base frequencies into its scaled ones", () => {
    const config = tinyModelConfig({ ...TINY_MODEL_DEFAULTS, hidden: 256, heads: 2, ropeScaling: "llama3" });
    const factors = llama3RopeFactors(config)!;
    expect(factors).toHaveLength(64);
    const scaled = inverseFrequencies(llamaConfigFromJson(config));
    const plain = inverseFrequencies(llamaConfigFromJson({ ...config, rope_scaling: null }));
    for (let i = 0; i < 64; i++) expect(plain[i]! / factors[i]!).toBeCloseTo(scaled[i]!, 6);
    expect(factors[0]).toBe(1);
    expect(factors[63]).toBe(8);
    expect(llama3RopeFactors({ ...config, rope_scaling: null })).toBeNull();
  });

  test("tensor names; q/k permuted for llama only; lm_head dropped when tied; unknown tensors named", () => {
    const llama = hfModelShape(tinyModelConfig({ ...TINY_MODEL_DEFAULTS }));
    expect(hfTensorMapping("model.layers.1.self_attn.q_proj.weight", llama)).toEqual({ ggufName: "blk.1.attn_q.weight", permuteHeads: 4 });
    expect(hfTensorMapping("model.layers.0.self_attn.k_proj.weight", llama)).toEqual({ ggufName: "blk.0.attn_k.weight", permuteHeads: 2 });
    expect(hfTensorMapping("model.layers.0.self_attn.v_proj.weight", llama)).toEqual({ ggufName: "blk.0.attn_v.weight", permuteHeads: 0 });
    expect(hfTensorMapping("model.layers.0.post_attention_layernorm.weight", llama)!.ggufName).toBe("blk.0.ffn_norm.weight");
    expect(hfTensorMapping("lm_head.weight", llama)!.ggufName).toBe("output.weight");
    expect(hfTensorMapping("model.layers.0.self_attn.rotary_emb.inv_freq", llama)).toBeNull();
    expect(() => hfTensorMapping("model.layers.0.mlp.experts.0.weight", llama)).toThrow("tensor model.layers.0.mlp.experts.0.weight has no GGUF name for llama");
    expect(() => hfTensorMapping("model.layers.7.mlp.up_proj.weight", llama)).toThrow("model.layers.7");
    const qwen = hfModelShape(tinyModelConfig({ ...TINY_MODEL_DEFAULTS, qkvBias: true, tieEmbeddings: true }));
    expect(hfTensorMapping("model.layers.0.self_attn.q_proj.bias", qwen)).toEqual({ ggufName: "blk.0.attn_q.bias", permuteHeads: 0 });
    expect(hfTensorMapping("lm_head.weight", qwen)).toBeNull();
  });

  test("qwen3: Qwen3ForCausalLM is qwen3, head_dim apart from hidden / heads as key_length, q/k norms named, nothing permuted", () => {
    const config = tinyModelConfig({ ...TINY_MODEL_DEFAULTS, qkNorm: true, headDim: 24 });
    expect(config).toMatchObject({ architectures: ["Qwen3ForCausalLM"], model_type: "qwen3", head_dim: 24 });
    const m = hfModelMetadata(config, "tiny-qwen3");
    expect(metadataString(m, "general.architecture")).toBe("qwen3");
    expect(metadataNumber(m, "qwen3.attention.key_length")).toBe(24);
    expect(metadataNumber(m, "qwen3.attention.value_length")).toBe(24);
    expect(metadataNumber(m, "qwen3.rope.dimension_count")).toBe(24);
    const shape = hfModelShape(config);
    expect(shape).toMatchObject({ architecture: "qwen3", headDim: 24 });
    expect(hfTensorMapping("model.layers.1.self_attn.q_norm.weight", shape)).toEqual({ ggufName: "blk.1.attn_q_norm.weight", permuteHeads: 0 });
    expect(hfTensorMapping("model.layers.0.self_attn.k_norm.weight", shape)).toEqual({ ggufName: "blk.0.attn_k_norm.weight", permuteHeads: 0 });
    expect(hfTensorMapping("model.layers.0.self_attn.q_proj.weight", shape)).toEqual({ ggufName: "blk.0.attn_q.weight", permuteHeads: 0 });
    expect(hfModelShape({ model_type: "qwen3", hidden_size: 64, num_attention_heads: 4, num_hidden_layers: 1 }).architecture).toBe("qwen3");
    const facts = { architecture: "qwen3", layers: 2, heads: 4, kvHeads: 2, experts: 0, tied: false };
    expect(tensorTypeFor("q4_k_m", "blk.0.attn_q_norm.weight", [128], facts)).toBe(GGML_TYPE.F32);
  });

  test("phi3 (llama.cpp's Phi3MiniModel): fused names kept, no permutation, rotary dims, LongRoPE tensors and attn_factor", () => {
    const config = {
      ...tinyModelConfig({ ...TINY_MODEL_DEFAULTS, hidden: 64, heads: 4, kvHeads: 2 }),
      architectures: ["Phi3ForCausalLM"],
      model_type: "phi3",
      partial_rotary_factor: 0.75,
      max_position_embeddings: 131072,
      original_max_position_embeddings: 4096,
      rope_scaling: { type: "longrope", long_factor: [1, 2, 3, 4, 5, 6], short_factor: [1, 1, 1, 1, 1, 2] },
    };
    const shape = hfModelShape(config);
    expect(shape.architecture).toBe("phi3");
    const m = hfModelMetadata(config, "Phi-4-mini-instruct");
    expect(metadataString(m, "general.architecture")).toBe("phi3");
    expect(metadataNumber(m, "phi3.rope.dimension_count")).toBe(12);
    expect(metadataNumber(m, "phi3.attention.sliding_window")).toBe(0);
    expect(metadataNumber(m, "phi3.rope.scaling.original_context_length")).toBe(4096);
    expect(metadataNumber(m, "phi3.rope.scaling.attn_factor")).toBeCloseTo(Math.sqrt(1 + Math.log(32) / Math.log(4096)), 6);
    expect(hfTensorMapping("model.layers.0.self_attn.qkv_proj.weight", shape)).toEqual({ ggufName: "blk.0.attn_qkv.weight", permuteHeads: 0 });
    expect(hfTensorMapping("model.layers.1.mlp.gate_up_proj.weight", shape)).toEqual({ ggufName: "blk.1.ffn_up.weight", permuteHeads: 0 });
    expect(hfRopeFactorTensors(config).map((t) => [t.name, [...t.values]])).toEqual([
      ["rope_factors_long.weight", [1, 2, 3, 4, 5, 6]],
      ["rope_factors_short.weight", [1, 1, 1, 1, 1, 2]],
    ]);
    expect(() => hfModelMetadata({ ...config, rope_scaling: { type: "longrope", long_factor: [1], short_factor: [1] } }, "x")).toThrow("rope_scaling.long_factor must be 6 positive numbers");
    expect(() => hfModelMetadata({ ...config, rope_scaling: { type: "yarn", factor: 2 } }, "x")).toThrow('rope_scaling type "yarn" is not supported for Phi3ForCausalLM');
    expect(hfRopeFactorTensors({ ...config, rope_scaling: null })).toEqual([]);
  });
});
