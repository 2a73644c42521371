import { describe, expect, test } from "bun:test";
import { ModelConfigError, inverseFrequencies, llamaConfigFromJson, referenceLlama, referenceLogits } from "../../src/model/referenceLlama.ts";
import { readSafetensors } from "../../src/model/safetensors.ts";
import { TINY_MODEL_DEFAULTS, type TinyModelOptions, tinyModelConfig, tinyModelFiles } from "../../src/model/tinyModel.ts";

function model(options: Partial<TinyModelOptions> = {}) {
  const full = { ...TINY_MODEL_DEFAULTS, seed: 5, ...options };
  const weights = tinyModelFiles(full).find((file) => file.name === "model.safetensors")!;
  return referenceLlama(tinyModelConfig(full), readSafetensors(new Uint8Array(Buffer.concat([...weights.chunks()]))));
}

const maxDiff = (a: Float64Array[], b: Float64Array[]) =>
  Math.max(...a.map((row, t) => Math.max(...row.map((v, i) => Math.abs(v - b[t]![i]!)))));

describe("reference Llama forward pass", () => {
  const ids = [256, 10, 200, 33, 7, 7, 150, 99];

  test("causal: a token's logits do not depend on later tokens", () => {
    const m = model();
    const full = referenceLogits(m, ids);
    const prefix = referenceLogits(m, ids.slice(0, 5));
    expect(maxDiff(prefix, full.slice(0, 5))).toBeLessThan(1e-12);
    const changed = referenceLogits(m, [...ids.slice(0, 5), 1, 2, 3]);
    expect(maxDiff(changed.slice(0, 5), full.slice(0, 5))).toBeLessThan(1e-12);
  });

  test("rotary embeddings make attention depend only on relative positions", () => {
    for (const options of [{}, { ropeScaling: "llama3" as const, ropeTheta: 500000 }]) {
      const m = model(options);
      const base = referenceLogits(m, ids);
      const shifted = referenceLogits(m, ids, ids.map((_, i) => i + 1000));
      expect(maxDiff(base, shifted)).toBeLessThan(1e-8);
      const spread = referenceLogits(m, ids, ids.map((_, i) => 2 * i));
      expect(maxDiff(base, spread)).toBeGreaterThan(1e-3);
    }
  });

  test("tied embeddings use the embedding as the output projection; biases are applied", () => {
    const tied = model({ tieEmbeddings: true, qkvBias: true });
    expect(tied.weight("lm_head.weight")).toBe(tied.weight("model.embed_tokens.weight"));
    expect(tied.has("model.layers.0.self_attn.q_proj.bias")).toBe(true);
    expect(referenceLogits(tied, ids).length).toBe(ids.length);
    expect(() => referenceLogits(tied, [259])).toThrow("outside the vocab");
  });

  test("qwen3 q/k norm: logits ignore the scale of q_proj and k_proj rows, and the norm weights move them", () => {
    const qwen3 = model({ qkNorm: true, headDim: 24 });
    expect(qwen3.config.headDim).toBe(24);
    const base = referenceLogits(qwen3, ids);
    // RMSNorm of each head removes a per-head scale: scaling q_proj and k_proj by 3 changes nothing
    // but for eps (2e-5 here), which it would without the norm (> 1e-2).
    for (const name of ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight"]) qwen3.weight(name).forEach((v, i, a) => (a[i] = 3 * v));
    expect(maxDiff(referenceLogits(qwen3, ids), base)).toBeLessThan(1e-4);
    const plain = model({ headDim: 24 });
    const plainBase = referenceLogits(plain, ids);
    plain.weight("model.layers.0.self_attn.q_proj.weight").forEach((v, i, a) => (a[i] = 3 * v));
    expect(maxDiff(referenceLogits(plain, ids), plainBase)).toBeGreaterThan(1e-2);
    const kNorm = qwen3.weight("model.layers.0.self_attn.k_norm.weight");
    kNorm.forEach((v, i, a) => (a[i] = i % 2 === 0 ? 2 * v : v));
    expect(maxDiff(referenceLogits(qwen3, ids), base)).toBeGreaterThan(1e-2);
  });

  test("llama3 rope scaling keeps high frequencies, divides low ones by the factor, blends between", () => {
    const config = llamaConfigFromJson(tinyModelConfig({ ...TINY_MODEL_DEFAULTS, ropeScaling: "llama3" }));
    const plain = inverseFrequencies({ ...config, ropeScaling: null });
    const scaled = inverseFrequencies(config);
    plain.forEach((f, i) => {
      const wavelength = (2 * Math.PI) / f;
      if (wavelength < 64) expect(scaled[i]).toBe(f);
      else if (wavelength > 256) expect(scaled[i]).toBeCloseTo(f / 8, 15);
      else expect(scaled[i]! < f && scaled[i]! > f / 8).toBe(true);
    });
  });

  test("config errors name the field", () => {
    const good = tinyModelConfig({ ...TINY_MODEL_DEFAULTS });
    expect(() => llamaConfigFromJson({ ...good, hidden_size: "64" })).toThrow(ModelConfigError);
    expect(() => llamaConfigFromJson({ ...good, hidden_size: 0 })).toThrow("hidden_size must be a positive integer");
    expect(() => llamaConfigFromJson({ ...good, num_key_value_heads: 3 })).toThrow("not a multiple of num_key_value_heads 3");
    expect(() => llamaConfigFromJson({ ...good, hidden_act: "gelu" })).toThrow("hidden_act \"gelu\" is not supported");
    expect(() => inverseFrequencies({ ...llamaConfigFromJson(good), ropeScaling: { rope_type: "yarn", factor: 4 } })).toThrow("yarn");
  });
});
