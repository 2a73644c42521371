import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DTYPE_BYTES, elementCount, readSafetensors, tensorToFloat32 } from "../../src/model/safetensors.ts";
import {
  TINY_MODEL_DEFAULTS,
  TinyModelError,
  type TinyModelOptions,
  checkTinyModelOptions,
  tinyModelConfig,
  tinyModelFiles,
  tinyModelParameterCount,
} from "../../src/model/tinyModel.ts";
import { ModelFolderError, writeModelFolder } from "../../src/model/writeModelFolder.ts";
import { tempFolder } from "../helpers/cli.ts";

let folder: { path: string; cleanup(): void };
beforeAll(() => {
  folder = tempFolder("ctxr-tiny-model-");
});
afterAll(() => folder.cleanup());

let caseNumber = 0;
function writeModel(options: Partial<TinyModelOptions> = {}): { dir: string; hashes: Record<string, string> } {
  const dir = join(folder.path, `model${caseNumber++}`);
  writeModelFolder(dir, tinyModelFiles({ ...TINY_MODEL_DEFAULTS, ...options }));
  const hashes: Record<string, string> = {};
  for (const name of readdirSync(dir).sort()) hashes[name] = createHash("sha256").update(readFileSync(join(dir, name))).digest("hex");
  return { dir, hashes };
}

function readModel(dir: string) {
  return {
    config: JSON.parse(readFileSync(join(dir, "config.json"), "utf8")) as Record<string, unknown>,
    weights: readSafetensors(new Uint8Array(readFileSync(join(dir, "model.safetensors")))),
  };
}

const FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"];

describe("tiny model: determinism", () => {
  test("the same seed gives byte-identical files; another seed changes only the weights and the config's seed", () => {
    const a = writeModel({ seed: 1 });
    const b = writeModel({ seed: 1 });
    const c = writeModel({ seed: 2 });
    expect(Object.keys(a.hashes)).toEqual(FILES);
    expect(b.hashes).toEqual(a.hashes);
    expect(c.hashes["model.safetensors"]).not.toBe(a.hashes["model.safetensors"]);
    expect(c.hashes["config.json"]).not.toBe(a.hashes["config.json"]);
    expect(c.hashes["tokenizer.json"]).toBe(a.hashes["tokenizer.json"]);
    expect(c.hashes["tokenizer_config.json"]).toBe(a.hashes["tokenizer_config.json"]);
  });

  test("a tensor does not depend on the other tensors (one stream per tensor name)", () => {
    const two = readModel(writeModel({ seed: 4, layers: 2 }).dir).weights.tensors;
    const three = readModel(writeModel({ seed: 4, layers: 3 }).dir).weights.tensors;
    for (const name of ["model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight", "lm_head.weight"]) {
      expect([...three.get(name)!.data]).toEqual([...two.get(name)!.data]);
    }
  });
});

describe("tiny model: Hugging Face Llama layout", () => {
  const layoutFolder = tempFolder("ctxr-tiny-layout-");
  afterAll(() => layoutFolder.cleanup());
  const dir = join(layoutFolder.path, "model");
  writeModelFolder(dir, tinyModelFiles({ ...TINY_MODEL_DEFAULTS, seed: 1 }));
  const { config, weights } = readModel(dir);

  test("config.json has the LlamaForCausalLM fields", () => {
    expect(config).toMatchObject({
      architectures: ["LlamaForCausalLM"],
      model_type: "llama",
      hidden_size: 64,
      intermediate_size: 128,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      num_hidden_layers: 2,
      head_dim: 16,
      vocab_size: 259,
      rms_norm_eps: 1e-5,
      rope_theta: 10000,
      rope_scaling: null,
      max_position_embeddings: 8192,
      tie_word_embeddings: false,
      torch_dtype: "float32",
      hidden_act: "silu",
      attention_bias: false,
      bos_token_id: 256,
      eos_token_id: 257,
      pad_token_id: 258,
    });
    expect((config.ctxr as { generator: string }).generator).toBe("ctxr model tiny --seed 1");
  });

  test("the tensors are named and shaped as in Hugging Face checkpoints, all F32", () => {
    const expected: Record<string, number[]> = {
      "model.embed_tokens.weight": [259, 64],
      "model.norm.weight": [64],
      "lm_head.weight": [259, 64],
    };
    for (let layer = 0; layer < 2; layer++) {
      const p = `model.layers.${layer}`;
      Object.assign(expected, {
        [`${p}.self_attn.q_proj.weight`]: [64, 64],
        [`${p}.self_attn.k_proj.weight`]: [32, 64],
        [`${p}.self_attn.v_proj.weight`]: [32, 64],
        [`${p}.self_attn.o_proj.weight`]: [64, 64],
        [`${p}.mlp.gate_proj.weight`]: [128, 64],
        [`${p}.mlp.up_proj.weight`]: [128, 64],
        [`${p}.mlp.down_proj.weight`]: [64, 128],
        [`${p}.input_layernorm.weight`]: [64],
        [`${p}.post_attention_layernorm.weight`]: [64],
      });
    }
    const got = Object.fromEntries([...weights.tensors.values()].map((t) => [t.name, t.shape]));
    expect(got).toEqual(expected);
    for (const tensor of weights.tensors.values()) expect(tensor.dtype).toBe("F32");
    expect(weights.metadata).toEqual({ format: "pt" });
    const parameters = [...weights.tensors.values()].reduce((sum, t) => sum + elementCount(t.shape), 0);
    expect(parameters).toBe(tinyModelParameterCount({ ...TINY_MODEL_DEFAULTS }));
  });

  test("offsets are contiguous from 0 to the end of the file and aligned", () => {
    expect(weights.dataStart % 8).toBe(0);
    let expected = 0;
    for (const entry of weights.entries) {
      expect(entry.begin).toBe(expected);
      expect(entry.fileOffset % DTYPE_BYTES[entry.dtype]).toBe(0);
      expected = entry.end;
    }
    expect(weights.dataStart + expected).toBe(readFileSync(join(dir, "model.safetensors")).length);
  });

  test("weights have the intended scale: 1/sqrt(fan_in) for projections and embeddings, 1 ± 0.1 for norms", () => {
    const stats = (name: string) => {
      const values = tensorToFloat32(weights.tensors.get(name)!);
      let sum = 0;
      let squares = 0;
      for (const v of values) sum += v;
      const mean = sum / values.length;
      for (const v of values) squares += (v - mean) ** 2;
      return { mean, std: Math.sqrt(squares / values.length) };
    };
    const near = (got: { mean: number; std: number }, mean: number, std: number) => {
      expect(Math.abs(got.mean - mean)).toBeLessThan(0.1 * std + 0.01);
      expect(Math.abs(got.std / std - 1)).toBeLessThan(0.1);
    };
    near(stats("model.embed_tokens.weight"), 0, 1 / 8);
    near(stats("model.layers.0.self_attn.q_proj.weight"), 0, 1 / 8);
    near(stats("model.layers.1.mlp.down_proj.weight"), 0, 1 / Math.sqrt(128));
    near(stats("lm_head.weight"), 0, 1 / 8);
    near(stats("model.layers.0.input_layernorm.weight"), 1, 0.1);
  });
});

describe("tiny model: options", () => {
  test("f16 and bf16 checkpoints hold the f32 weights rounded", () => {
    const f32 = readModel(writeModel({ seed: 3 }).dir);
    for (const dtype of ["f16", "bf16"] as const) {
      const half = readModel(writeModel({ seed: 3, dtype }).dir);
      expect(half.config.torch_dtype).toBe(dtype === "f16" ? "float16" : "bfloat16");
      for (const [name, tensor] of half.weights.tensors) {
        expect(tensor.dtype).toBe(dtype === "f16" ? "F16" : "BF16");
        const exact = tensorToFloat32(f32.weights.tensors.get(name)!);
        const rounded = tensorToFloat32(tensor);
        const relative = dtype === "f16" ? 2 ** -11 : 2 ** -8;
        for (let i = 0; i < exact.length; i++) {
          if (Math.abs(rounded[i]! - exact[i]!) > Math.abs(exact[i]!) * relative + 2 ** -24) throw new Error(`${name}[${i}]`);
        }
      }
    }
  });

  test("--tie-embeddings drops lm_head; --qkv-bias writes q/k/v biases as a Qwen2 checkpoint; llama3 rope scaling", () => {
    const { config, weights } = readModel(writeModel({ seed: 1, tieEmbeddings: true, qkvBias: true, ropeScaling: "llama3", ropeTheta: 500000 }).dir);
    expect(weights.tensors.has("lm_head.weight")).toBe(false);
    expect(config.tie_word_embeddings).toBe(true);
    expect(config.architectures).toEqual(["Qwen2ForCausalLM"]);
    expect(config.model_type).toBe("qwen2");
    expect(config.rope_theta).toBe(500000);
    expect(config.rope_scaling).toEqual({ rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 256 });
    expect(weights.tensors.get("model.layers.1.self_attn.q_proj.bias")!.shape).toEqual([64]);
    expect(weights.tensors.get("model.layers.1.self_attn.k_proj.bias")!.shape).toEqual([32]);
    expect(weights.tensors.get("model.layers.1.self_attn.v_proj.bias")!.shape).toEqual([32]);
    expect(weights.tensors.has("model.layers.1.self_attn.o_proj.bias")).toBe(false);
    expect((config.ctxr as { generator: string }).generator).toBe(
      "ctxr model tiny --seed 1 --rope-theta 500000 --rope-scaling llama3 --tie-embeddings --qkv-bias",
    );
  });

  test("--qk-norm --head-dim writes a Qwen3 checkpoint: q/k norms of head_dim, projections heads · head_dim wide", () => {
    const { config, weights } = readModel(writeModel({ seed: 1, qkNorm: true, headDim: 24 }).dir);
    expect(config.architectures).toEqual(["Qwen3ForCausalLM"]);
    expect(config.model_type).toBe("qwen3");
    expect(config.head_dim).toBe(24);
    expect(config.attention_bias).toBe(false);
    expect(weights.tensors.get("model.layers.1.self_attn.q_norm.weight")!.shape).toEqual([24]);
    expect(weights.tensors.get("model.layers.1.self_attn.k_norm.weight")!.shape).toEqual([24]);
    expect(weights.tensors.get("model.layers.1.self_attn.q_proj.weight")!.shape).toEqual([96, 64]);
    expect(weights.tensors.get("model.layers.1.self_attn.k_proj.weight")!.shape).toEqual([48, 64]);
    expect(weights.tensors.get("model.layers.1.self_attn.o_proj.weight")!.shape).toEqual([64, 96]);
    expect(weights.tensors.has("model.layers.1.self_attn.q_proj.bias")).toBe(false);
    expect((config.ctxr as { generator: string }).generator).toBe("ctxr model tiny --seed 1 --head-dim 24 --qk-norm");
  });

  test("--attention-gain scales q_proj and k_proj only, and is part of the generator line", () => {
    const plain = readModel(writeModel({ seed: 3 }).dir).weights;
    const { config, weights } = readModel(writeModel({ seed: 3, attentionGain: 4 }).dir);
    for (const name of ["q_proj", "k_proj"]) {
      const a = tensorToFloat32(plain.tensors.get(`model.layers.1.self_attn.${name}.weight`)!);
      const b = tensorToFloat32(weights.tensors.get(`model.layers.1.self_attn.${name}.weight`)!);
      for (let i = 0; i < a.length; i += 97) expect(b[i]!).toBeCloseTo(4 * a[i]!, 5);
    }
    for (const name of ["model.layers.1.self_attn.v_proj.weight", "model.layers.0.mlp.up_proj.weight", "lm_head.weight"])
      expect(Array.from(tensorToFloat32(weights.tensors.get(name)!))).toEqual(Array.from(tensorToFloat32(plain.tensors.get(name)!)));
    expect((config.ctxr as { generator: string }).generator).toBe("ctxr model tiny --seed 3 --attention-gain 4");
    expect((config.ctxr as { init: string }).init).toContain("q_proj and k_proj std times 4");
  });

  test("a larger vocab pads the embedding beyond the tokenizer's 259 tokens", () => {
    const { config, weights } = readModel(writeModel({ vocab: 320 }).dir);
    expect(config.vocab_size).toBe(320);
    expect(weights.tensors.get("model.embed_tokens.weight")!.shape).toEqual([320, 64]);
  });

  test("impossible shapes are refused with messages naming the sizes", () => {
    const cases: [Partial<TinyModelOptions>, string][] = [
      [{ heads: 5 }, "hidden size 64 is not a multiple of the 5 attention heads"],
      [{ kvHeads: 3 }, "4 attention heads are not a multiple of the 3 key/value heads"],
      [{ hidden: 24, heads: 8, kvHeads: 8 }, "head size 3 (hidden / heads) must be even"],
      [{ headDim: 7 }, "head size 7 must be even"],
      [{ qkNorm: true, qkvBias: true }, "pick one"],
      [{ vocab: 100 }, "vocab size must be an integer >= 259"],
      [{ layers: 0 }, "layers must be a positive integer"],
      [{ seed: -1 }, "seed must be a non-negative integer"],
      [{ ropeTheta: 0 }, "rope theta must be a positive number"],
      [{ attentionGain: 0 }, "attention gain must be a positive number, got 0"],
      [{ attentionGain: Number.NaN }, "attention gain must be a positive number, got NaN"],
      [{ vocab: 2 ** 26, hidden: 64 }, "over the limit"],
    ];
    for (const [options, message] of cases) {
      expect(() => checkTinyModelOptions({ ...TINY_MODEL_DEFAULTS, ...options })).toThrow(TinyModelError);
      expect(() => checkTinyModelOptions({ ...TINY_MODEL_DEFAULTS, ...options })).toThrow(message);
    }
    expect(tinyModelConfig({ ...TINY_MODEL_DEFAULTS }).ctxr).toMatchObject({ generator: "ctxr model tiny --seed 0" });
  });
});

describe("writeModelFolder", () => {
  test("refuses a non-empty folder unless overwriting, and a file in the way", () => {
    const dir = join(folder.path, "busy");
    mkdirSync(dir);
    writeFileSync(join(dir, "model-00002-of-00002.safetensors"), "stale");
    const files = tinyModelFiles({ ...TINY_MODEL_DEFAULTS });
    expect(() => writeModelFolder(dir, files)).toThrow(ModelFolderError);
    expect(() => writeModelFolder(dir, files)).toThrow("is not empty");
    expect(writeModelFolder(dir, files, { overwrite: true }).map((f) => f.name)).toEqual(FILES);
    expect(() => writeModelFolder(join(dir, "config.json"), files)).toThrow("exists and is not a folder");
    // No temporary files are left behind.
    expect(readdirSync(dir).sort()).toEqual([...FILES, "model-00002-of-00002.safetensors"].sort());
  });
});
