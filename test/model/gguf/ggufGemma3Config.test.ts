/**
 * ggufGemma3Config.ts: Gemma 3's config.json fields from GGUF metadata as llama.cpp reads them
 * (which layers slide, local rope base, query scale), and errors naming the key.
 */
import { describe, expect, test } from "bun:test";
import { gemma3ConfigFields, gemma3LocalLayers } from "../../../src/model/gguf/ggufGemma3Config.ts";
import { ggufModelConfig } from "../../../src/model/gguf/ggufModelConfig.ts";

const base: [string, unknown][] = [
  ["general.architecture", "gemma3"],
  ["gemma3.context_length", 4096],
  ["gemma3.embedding_length", 64],
  ["gemma3.block_count", 8],
  ["gemma3.feed_forward_length", 128],
  ["gemma3.attention.head_count", 2],
  ["gemma3.attention.head_count_kv", 1],
  ["gemma3.attention.key_length", 48],
  ["gemma3.vocab_size", 300],
];
const shape = { hidden: 64, heads: 2, headDim: 48, layers: 8 };

describe("gemma3 GGUF config", () => {
  test("llama.cpp's pattern: every 6th layer global by default; period 0 makes every layer local", () => {
    expect(gemma3LocalLayers(8, 6)).toEqual([true, true, true, true, true, false, true, true]);
    expect(gemma3LocalLayers(3, 0)).toEqual([true, true, true]);
    expect(gemma3LocalLayers(3, 1)).toEqual([false, false, false]);
  });

  test("the config.json of a gemma3 file: window, layer types, local base, query scale, GeGLU", () => {
    const config = ggufModelConfig(new Map([...base, ["gemma3.attention.sliding_window", 512]]), []);
    expect(config.architecture).toBe("gemma3");
    expect(config.configJson).toMatchObject({
      architectures: ["Gemma3ForCausalLM"],
      model_type: "gemma3_text",
      hidden_activation: "gelu_pytorch_tanh",
      sliding_window: 512,
      rope_local_base_freq: 10000,
      query_pre_attn_scalar: 48,
      final_logit_softcapping: null,
    });
    expect(config.configJson.hidden_act).toBeUndefined();
    expect(config.configJson.layer_types).toEqual(["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]);
  });

  test("no sliding_window: every layer global; a bool pattern; freq_base_swa; the 27B's query scale", () => {
    expect(gemma3ConfigFields(new Map(base), shape).layer_types).toEqual(new Array(8).fill("full_attention"));
    const pattern = [true, false, true, false, true, false, true, false];
    const fields = gemma3ConfigFields(new Map<string, unknown>([...base, ["gemma3.attention.sliding_window", 16], ["gemma3.attention.sliding_window_pattern", pattern], ["gemma3.rope.freq_base_swa", 5000]]), shape);
    expect(fields.layer_types).toEqual(pattern.map((local) => (local ? "sliding_attention" : "full_attention")));
    expect(fields.rope_local_base_freq).toBe(5000);
    expect(gemma3ConfigFields(new Map(base), { hidden: 5376, heads: 32, headDim: 128, layers: 62 }).query_pre_attn_scalar).toBe(168);
  });

  test("bad values name the key", () => {
    const withKey = (key: string, value: unknown) => new Map<string, unknown>([...base, ["gemma3.attention.sliding_window", 16], [key, value]]);
    expect(() => gemma3ConfigFields(withKey("gemma3.attention.sliding_window_pattern", [true, false]), shape)).toThrow(/gemma3\.attention\.sliding_window_pattern must be an integer or 8 bools/);
    expect(() => gemma3ConfigFields(withKey("gemma3.rope.freq_base_swa", -1), shape)).toThrow(/gemma3\.rope\.freq_base_swa must be positive/);
    expect(() => gemma3ConfigFields(withKey("gemma3.attention.sliding_window", "wide"), shape)).toThrow(/gemma3\.attention\.sliding_window/);
  });
});
