import { describe, expect, test } from "bun:test";
import { GGML_TYPE, type GgmlType, ggmlTypeName } from "../../../src/model/gguf/ggufTypes.ts";
import { allowsQuantization, tensorCategory } from "../../../src/model/gguf/quantizeTensorCategory.ts";
import { type ModelFactsForPlan, type QuantizeType, planTensorTypes, tensorTypeFor, useMoreBits } from "../../../src/model/gguf/quantizeTypePlan.ts";

const LLAMA: ModelFactsForPlan = { architecture: "llama", layers: 32, heads: 32, kvHeads: 8, experts: 0, tied: false };
const UNTIED = LLAMA;
const TIED = { ...LLAMA, tied: true };

/** A llama-shaped tensor list in gguf-py's order (by layer, attention before ffn). */
function llamaTensors(layers: number, hidden: number, ffn: number, kvWidth: number, tied = false): { name: string; dims: number[] }[] {
  const tensors = [{ name: "token_embd.weight", dims: [hidden, 300] }];
  for (let i = 0; i < layers; i++) {
    const p = `blk.${i}.`;
    tensors.push(
      { name: p + "attn_norm.weight", dims: [hidden] },
      { name: p + "attn_q.weight", dims: [hidden, hidden] },
      { name: p + "attn_k.weight", dims: [hidden, kvWidth] },
      { name: p + "attn_v.weight", dims: [hidden, kvWidth] },
      { name: p + "attn_output.weight", dims: [hidden, hidden] },
      { name: p + "ffn_norm.weight", dims: [hidden] },
      { name: p + "ffn_gate.weight", dims: [hidden, ffn] },
      { name: p + "ffn_up.weight", dims: [hidden, ffn] },
      { name: p + "ffn_down.weight", dims: [ffn, hidden] },
    );
  }
  tensors.push({ name: "output_norm.weight", dims: [hidden] });
  if (!tied) tensors.push({ name: "output.weight", dims: [hidden, 300] });
  return tensors;
}

function planByName(plan: QuantizeType, tensors: { name: string; dims: number[] }[], model: ModelFactsForPlan): Map<string, string> {
  const types = planTensorTypes(plan, tensors, model);
  return new Map(tensors.map((t, i) => [t.name, types[i] === null ? "keep" : ggmlTypeName(types[i] as GgmlType)]));
}

describe("which tensors llama.cpp quantizes, and their roles", () => {
  test("norms, 1-D tensors, biases and MoE routers keep their type; the rest are quantized", () => {
    expect(allowsQuantization("blk.0.attn_norm.weight", [256])).toBe(false);
    expect(allowsQuantization("blk.0.attn_q_norm.weight", [64, 1])).toBe(false);
    expect(allowsQuantization("blk.0.attn_q.bias", [256, 1])).toBe(false);
    expect(allowsQuantization("blk.0.ffn_gate_inp.weight", [256, 8])).toBe(false);
    expect(allowsQuantization("rope_freqs.weight", [32])).toBe(false);
    expect(allowsQuantization("blk.0.ffn_down_exps.weight", [512, 256, 8])).toBe(true);
    expect(allowsQuantization("token_embd.weight", [256, 300])).toBe(true);
  });

  test("categories in llama.cpp's order", () => {
    expect(tensorCategory("blk.0.attn_qkv.weight")).toBe("attn_qkv");
    expect(tensorCategory("blk.0.attn_v.weight")).toBe("attn_v");
    expect(tensorCategory("blk.0.ffn_up_exps.weight")).toBe("ffn_up");
    expect(tensorCategory("blk.0.ffn_down_shexp.weight")).toBe("ffn_down");
    expect(tensorCategory("blk.0.ffn_gate.weight")).toBe("ffn_gate");
    expect(tensorCategory("output.weight")).toBe("output");
    expect(tensorCategory("blk.0.attn_sinks.weight")).toBe("other");
  });
});

describe("tensor types: one tensor", () => {
  test("norms F32, output at Q6_K for q4_k, fallbacks for short rows", () => {
    expect(tensorTypeFor("q4_k", "blk.0.attn_norm.weight", [256], UNTIED)).toBe(GGML_TYPE.F32);
    expect(tensorTypeFor("q4_k", "blk.0.ffn_up.weight", [256, 512], UNTIED)).toBe(GGML_TYPE.Q4_K);
    expect(tensorTypeFor("q4_k", "output.weight", [256, 512], UNTIED)).toBe(GGML_TYPE.Q6_K);
    expect(tensorTypeFor("q4_k", "token_embd.weight", [256, 512], UNTIED)).toBe(GGML_TYPE.Q4_K);
    expect(tensorTypeFor("q4_k", "token_embd.weight", [256, 512], TIED)).toBe(GGML_TYPE.Q6_K);
    expect(tensorTypeFor("q4_k", "blk.0.ffn_up.weight", [64, 512], UNTIED)).toBe(GGML_TYPE.Q8_0);
    expect(tensorTypeFor("q8_0", "blk.0.ffn_up.weight", [48, 512], UNTIED)).toBe(GGML_TYPE.F16);
    expect(tensorTypeFor("bf16", "blk.0.ffn_up.weight", [48, 512], UNTIED)).toBe(GGML_TYPE.BF16);
  });

  test("q4_k_m: attn_v and ffn_down of llama.cpp's more-bits layers are Q6_K", () => {
    const more = Array.from({ length: 32 }, (_, i) => i).filter((i) => useMoreBits(i, 32));
    expect(more).toEqual([0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
    const v = (index: number) => ({ attentionValue: { index, count: 32 } });
    const down = (index: number) => ({ ffnDown: { index, count: 32 } });
    expect(tensorTypeFor("q4_k_m", "blk.6.attn_v.weight", [256, 256], LLAMA, v(6))).toBe(GGML_TYPE.Q6_K);
    expect(tensorTypeFor("q4_k_m", "blk.7.attn_v.weight", [256, 256], LLAMA, v(7))).toBe(GGML_TYPE.Q4_K);
    expect(tensorTypeFor("q4_k_m", "blk.0.ffn_down.weight", [256, 256], LLAMA, down(0))).toBe(GGML_TYPE.Q6_K);
    expect(tensorTypeFor("q4_k_m", "blk.0.ffn_up.weight", [256, 256], LLAMA)).toBe(GGML_TYPE.Q4_K);
    expect(tensorTypeFor("q4_k", "blk.0.ffn_down.weight", [256, 256], LLAMA, down(0))).toBe(GGML_TYPE.Q4_K);
  });

  test("q5_k_m: Q5_K weights, Q6_K on the more-bits layers; fallbacks Q5_1 and Q8_0", () => {
    expect(tensorTypeFor("q5_k_m", "blk.1.attn_q.weight", [256, 256], LLAMA)).toBe(GGML_TYPE.Q5_K);
    expect(tensorTypeFor("q5_k_m", "blk.9.attn_v.weight", [256, 64], LLAMA, { attentionValue: { index: 9, count: 32 } })).toBe(GGML_TYPE.Q6_K);
    expect(tensorTypeFor("q5_k_m", "blk.10.attn_v.weight", [256, 64], LLAMA, { attentionValue: { index: 10, count: 32 } })).toBe(GGML_TYPE.Q5_K);
    expect(tensorTypeFor("q5_k_m", "blk.10.ffn_down.weight", [544, 256], LLAMA, { ffnDown: { index: 10, count: 32 } })).toBe(GGML_TYPE.Q5_1);
    expect(tensorTypeFor("q5_k_m", "blk.9.ffn_down.weight", [544, 256], LLAMA, { ffnDown: { index: 9, count: 32 } })).toBe(GGML_TYPE.Q8_0);
    expect(tensorTypeFor("q5_k_m", "token_embd.weight", [544, 300], LLAMA)).toBe(GGML_TYPE.Q5_1);
    expect(tensorTypeFor("q5_k_m", "output.weight", [256, 300], LLAMA)).toBe(GGML_TYPE.Q6_K);
  });

  test("rows that are not whole blocks: Q4_K → Q5_0, Q6_K → Q8_0, then F16; the output → Q8_0, then F16", () => {
    expect(tensorTypeFor("q4_k_m", "blk.10.ffn_down.weight", [544, 256], LLAMA, { ffnDown: { index: 10, count: 32 } })).toBe(GGML_TYPE.Q5_0);
    expect(tensorTypeFor("q4_k_m", "blk.9.ffn_down.weight", [544, 256], LLAMA, { ffnDown: { index: 9, count: 32 } })).toBe(GGML_TYPE.Q8_0);
    expect(tensorTypeFor("q4_k_m", "blk.10.ffn_down.weight", [48, 256], LLAMA, { ffnDown: { index: 10, count: 32 } })).toBe(GGML_TYPE.F16);
    expect(tensorTypeFor("q4_k_m", "output.weight", [544, 300], LLAMA)).toBe(GGML_TYPE.Q8_0);
    expect(tensorTypeFor("q4_k_m", "token_embd.weight", [544, 300], TIED)).toBe(GGML_TYPE.Q8_0);
    expect(tensorTypeFor("q4_k_m", "output.weight", [48, 300], LLAMA)).toBe(GGML_TYPE.F16);
    expect(tensorTypeFor("q4_0", "output.weight", [256, 300], LLAMA)).toBe(GGML_TYPE.Q6_K);
    expect(tensorTypeFor("q4_0", "blk.0.ffn_up.weight", [48, 300], LLAMA)).toBe(GGML_TYPE.F16);
  });

  test("fused qkv counts as attention v (llama.cpp's separate qkv rule is never reached)", () => {
    const phi3 = { ...LLAMA, architecture: "phi3" };
    expect(tensorTypeFor("q4_k_m", "blk.0.attn_qkv.weight", [256, 768], phi3, { attentionValue: { index: 0, count: 32 } })).toBe(GGML_TYPE.Q6_K);
    expect(tensorTypeFor("q4_k_m", "blk.4.attn_qkv.weight", [256, 768], phi3, { attentionValue: { index: 4, count: 32 } })).toBe(GGML_TYPE.Q4_K);
  });

  test("GQA: a 70B-class llama (80 layers, fewer kv heads) gets Q5_K attn_v where it would be Q4_K", () => {
    const seventyB = { ...LLAMA, layers: 80, heads: 64, kvHeads: 8 };
    const v = { attentionValue: { index: 11, count: 80 } }; // not a more-bits layer
    expect(useMoreBits(11, 80)).toBe(false);
    expect(tensorTypeFor("q4_k_m", "blk.11.attn_v.weight", [8192, 1024], seventyB, v)).toBe(GGML_TYPE.Q5_K);
    expect(tensorTypeFor("q4_k_m", "blk.11.attn_v.weight", [8192, 8192], { ...seventyB, kvHeads: 64 }, v)).toBe(GGML_TYPE.Q4_K);
    expect(tensorTypeFor("q4_k_m", "blk.11.attn_v.weight", [8192, 1024], { ...seventyB, layers: 79 }, v)).toBe(GGML_TYPE.Q4_K);
    expect(tensorTypeFor("q4_k_m", "blk.11.attn_v.weight", [8192, 1024], { ...seventyB, architecture: "qwen2", kvHeads: 64 }, v)).toBe(GGML_TYPE.Q5_K);
    expect(tensorTypeFor("q4_k_m", "blk.11.attn_q.weight", [8192, 8192], seventyB)).toBe(GGML_TYPE.Q4_K);
  });

  test("8 experts: attn_v and attn_k Q8_0, attn_output Q5_K at Q4_K_*", () => {
    const mixtral = { ...LLAMA, experts: 8 };
    expect(tensorTypeFor("q4_k_m", "blk.0.attn_v.weight", [4096, 1024], mixtral, { attentionValue: { index: 0, count: 32 } })).toBe(GGML_TYPE.Q8_0);
    expect(tensorTypeFor("q4_k_m", "blk.5.attn_k.weight", [4096, 1024], mixtral)).toBe(GGML_TYPE.Q8_0);
    expect(tensorTypeFor("q4_k_m", "blk.5.attn_output.weight", [4096, 4096], mixtral)).toBe(GGML_TYPE.Q5_K);
    expect(tensorTypeFor("q5_k_m", "blk.5.attn_output.weight", [4096, 4096], mixtral)).toBe(GGML_TYPE.Q5_K);
    expect(tensorTypeFor("q4_k_m", "blk.5.attn_output.weight", [4096, 4096], { ...mixtral, experts: 128 })).toBe(GGML_TYPE.Q4_K);
  });

  test("q4_k_s: attn_v of the first four and ffn_down of the first eighth at Q5_K", () => {
    expect(tensorTypeFor("q4_k_s", "blk.3.attn_v.weight", [256, 64], LLAMA, { attentionValue: { index: 3, count: 32 } })).toBe(GGML_TYPE.Q5_K);
    expect(tensorTypeFor("q4_k_s", "blk.4.attn_v.weight", [256, 64], LLAMA, { attentionValue: { index: 4, count: 32 } })).toBe(GGML_TYPE.Q4_K);
    expect(tensorTypeFor("q4_k_s", "blk.3.ffn_down.weight", [512, 256], LLAMA, { ffnDown: { index: 3, count: 32 } })).toBe(GGML_TYPE.Q5_K);
    expect(tensorTypeFor("q4_k_s", "blk.4.ffn_down.weight", [512, 256], LLAMA, { ffnDown: { index: 4, count: 32 } })).toBe(GGML_TYPE.Q4_K);
    expect(tensorTypeFor("q5_k_s", "blk.0.ffn_down.weight", [512, 256], LLAMA, { ffnDown: { index: 0, count: 32 } })).toBe(GGML_TYPE.Q5_K);
  });
});

describe("tensor types: a whole model, counted as llama.cpp counts", () => {
  const eightLayers = { ...LLAMA, layers: 8, heads: 4, kvHeads: 1 };

  test("q4_k_m on 8 layers: attn_v/ffn_down of layers 0, 3, 6, 7 Q6_K; norms kept", () => {
    const types = planByName("q4_k_m", llamaTensors(8, 256, 512, 64), eightLayers);
    const bumped = [0, 1, 2, 3, 4, 5, 6, 7].filter((i) => types.get(`blk.${i}.attn_v.weight`) === "Q6_K");
    expect(bumped).toEqual([0, 3, 6, 7]);
    expect([0, 1, 2, 3, 4, 5, 6, 7].filter((i) => types.get(`blk.${i}.ffn_down.weight`) === "Q6_K")).toEqual([0, 3, 6, 7]);
    expect(types.get("blk.1.attn_v.weight")).toBe("Q4_K");
    expect(types.get("blk.1.attn_norm.weight")).toBe("keep");
    expect(types.get("token_embd.weight")).toBe("Q4_K");
    expect(types.get("output.weight")).toBe("Q6_K");
  });

  test("the positions follow llama.cpp's order (by layer number), not the file's or the names'", () => {
    const tensors = llamaTensors(12, 256, 512, 64);
    const shuffled = [...tensors].reverse();
    const model = { ...eightLayers, layers: 12 };
    expect(planByName("q4_k_m", shuffled, model)).toEqual(planByName("q4_k_m", tensors, model));
    // blk.10 sorts after blk.9, not after blk.1 as text would (which would make blk.10 Q4_K and blk.4 Q6_K)
    const types = planByName("q4_k_m", shuffled, model);
    const layers = Array.from({ length: 12 }, (_, i) => i);
    expect(layers.map((i) => types.get(`blk.${i}.attn_v.weight`))).toEqual(layers.map((i) => (useMoreBits(i, 12) ? "Q6_K" : "Q4_K")));
    expect([4, 10].map((i) => types.get(`blk.${i}.attn_v.weight`))).toEqual(["Q4_K", "Q6_K"]);
  });

  test("attention v is counted among the layers that have one", () => {
    // 8 layers, only the odd ones with attn_v: 4 of them, so the first (layer 1) and last (layer 7) and (i - 0) % 3 = 2
    const tensors = llamaTensors(8, 256, 512, 64).filter((t) => !(t.name.endsWith("attn_v.weight") && Number(t.name.split(".")[1]) % 2 === 0));
    const types = planByName("q4_k_m", tensors, eightLayers);
    expect([1, 3, 5, 7].map((i) => types.get(`blk.${i}.attn_v.weight`))).toEqual([0, 1, 2, 3].map((i) => (useMoreBits(i, 4) ? "Q6_K" : "Q4_K")));
  });

  test("mixture of experts: ffn_down's layer comes from its name", () => {
    const moe = { ...eightLayers, experts: 4 };
    const tensors = [0, 1, 2, 3].flatMap((i) => [
      { name: `blk.${i}.ffn_down_exps.weight`, dims: [512, 256, 4] },
      { name: `blk.${i}.ffn_down_shexp.weight`, dims: [512, 256] },
    ]);
    const types = planByName("q4_k_m", tensors, moe);
    expect([0, 1, 2, 3].map((i) => types.get(`blk.${i}.ffn_down_exps.weight`))).toEqual(["Q6_K", "Q4_K", "Q4_K", "Q6_K"]);
    expect(types.get("blk.3.ffn_down_shexp.weight")).toBe("Q6_K");
  });

  test("tied embeddings: token_embd takes the output's type and is not counted", () => {
    const types = planByName("q5_k_m", llamaTensors(8, 256, 544, 64, true), { ...eightLayers, tied: true });
    expect(types.get("token_embd.weight")).toBe("Q6_K");
    expect(types.get("blk.1.ffn_down.weight")).toBe("Q5_1");
    expect(types.get("blk.0.ffn_down.weight")).toBe("Q8_0");
  });

  test("f16 and bf16 convert every quantizable tensor, output included", () => {
    const types = planByName("f16", llamaTensors(2, 256, 512, 64), eightLayers);
    expect(types.get("output.weight")).toBe("F16");
    expect(types.get("blk.0.attn_v.weight")).toBe("F16");
    expect(types.get("blk.0.ffn_norm.weight")).toBe("keep");
  });
});
