import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGML_TYPE } from "../../src/model/gguf/ggufTypes.ts";
import { type GgufValue, metadataArray, metadataNumber, metadataString } from "../../src/model/gguf/ggufMetadata.ts";
import { dequantizeValues } from "../../src/model/gguf/ggufQuantize.ts";
import { type GgufHeader, readGgufFile, readGgufTensorData } from "../../src/model/gguf/ggufReader.ts";
import { permuteQueryKeyRows } from "../../src/model/gguf/hfToGguf.ts";
import { encodeSafetensors, readSafetensors } from "../../src/model/safetensors.ts";
import { openSafetensorsFolder } from "../../src/model/safetensorsFolder.ts";
import { lastJsonLine, runCli } from "../helpers/cli.ts";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";

// hidden 256 so that the K-quants apply to the projections' rows (256 values a block).
const llama = tinyModelFolder({ hidden: 256, heads: 4, kvHeads: 2, intermediate: 512, ropeScaling: "llama3" }, "llama");
const qwen = tinyModelFolder({ hidden: 256, heads: 4, kvHeads: 2, intermediate: 512, qkvBias: true, tieEmbeddings: true }, "qwen");
const out = join(llama.path, "..", "out");
mkdirSync(out);
afterAll(() => {
  llama.cleanup();
  qwen.cleanup();
});

function tensorValues(path: string, gguf: GgufHeader, name: string): Float32Array {
  const info = gguf.tensors.find((t) => t.name === name);
  if (!info) throw new Error(`no tensor ${name} in ${path}`);
  return dequantizeValues(info.type, readGgufTensorData(path, info), info.dims.reduce((a, b) => a * b, 1));
}

function relativeRmsError(expected: Float32Array, actual: Float32Array): number {
  let error = 0;
  let sum = 0;
  for (let i = 0; i < expected.length; i++) {
    error += (actual[i]! - expected[i]!) ** 2;
    sum += expected[i]! ** 2;
  }
  return Math.sqrt(error / sum);
}

const BOUNDS: Record<string, number> = { f32: 0, f16: 0.001, bf16: 0.005, q8_0: 0.01, q6_k: 0.03, q5_k_s: 0.05, q5_k_m: 0.05, q4_k: 0.1, q4_k_s: 0.1, q4_k_m: 0.1, q4_0: 0.12 };

describe("ctxr model quantize", () => {
  for (const [type, bound] of Object.entries(BOUNDS)) {
    test(`llama folder → ${type}: metadata, names, types, values within ${bound}, q/k permutation undone gives the rows`, () => {
      const path = join(out, `llama-${type}.gguf`);
      const run = runCli(["model", "quantize", llama.path, path, "--type", type]);
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      const summary = lastJsonLine(run.stdout);
      const gguf = readGgufFile(path);
      expect(summary.bytes).toBe(gguf.fileBytes);
      const m = gguf.metadata;
      expect(metadataString(m, "general.architecture")).toBe("llama");
      expect(metadataNumber(m, "llama.embedding_length")).toBe(256);
      expect(metadataNumber(m, "llama.block_count")).toBe(2);
      expect(metadataNumber(m, "llama.attention.head_count_kv")).toBe(2);
      expect(metadataNumber(m, "llama.rope.dimension_count")).toBe(64);
      expect(metadataString(m, "tokenizer.ggml.model")).toBe("gpt2");
      expect(metadataArray(m, "tokenizer.ggml.tokens").items).toHaveLength(259);
      expect(metadataNumber(m, "tokenizer.ggml.bos_token_id")).toBe(256);
      expect(metadataNumber(m, "tokenizer.ggml.eos_token_id")).toBe(257);
      expect(metadataString(m, "tokenizer.chat_template")).toContain("[INST]");
      const names = gguf.tensors.map((t) => t.name);
      for (const name of ["rope_freqs.weight", "token_embd.weight", "blk.1.attn_q.weight", "blk.1.ffn_down.weight", "output_norm.weight", "output.weight"]) expect(names).toContain(name);
      const typeOf = (name: string) => gguf.tensors.find((t) => t.name === name)!.type;
      expect(typeOf("blk.0.attn_norm.weight")).toBe(GGML_TYPE.F32);
      const expectedWeights: Record<string, number> = { f32: 0, f16: 1, bf16: 30, q8_0: 8, q6_k: 14, q5_k_s: 13, q5_k_m: 13, q4_k: 12, q4_k_s: 12, q4_k_m: 12, q4_0: 2 };
      expect(typeOf("blk.0.ffn_up.weight")).toBe(expectedWeights[type]!);
      if (type.startsWith("q4_") || type.startsWith("q5_")) expect(typeOf("output.weight")).toBe(GGML_TYPE.Q6_K);
      if (type === "q4_k_m") expect([typeOf("blk.0.attn_v.weight"), typeOf("blk.1.attn_v.weight")]).toEqual([GGML_TYPE.Q4_K, GGML_TYPE.Q6_K]); // 2 layers: the last gets more bits
      if (type === "q5_k_m") expect([typeOf("blk.0.attn_v.weight"), typeOf("blk.1.attn_v.weight")]).toEqual([GGML_TYPE.Q5_K, GGML_TYPE.Q6_K]);
      if (type === "q4_k_s") expect([typeOf("blk.1.attn_v.weight"), typeOf("blk.1.ffn_down.weight")]).toEqual([GGML_TYPE.Q5_K, GGML_TYPE.Q4_K]); // layers 0-3' attn_v
      expect(gguf.tensors.find((t) => t.name === "blk.0.ffn_down.weight")!.dims).toEqual([512, 256]);

      const folder = openSafetensorsFolder(llama.path);
      const pairs: [string, string, number][] = [
        ["model.embed_tokens.weight", "token_embd.weight", 0],
        ["model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight", 0],
        ["model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight", 4],
        ["model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight", 2],
      ];
      for (const [hfName, ggufName, heads] of pairs) {
        const original = folder.readFloat32(hfName);
        let values = tensorValues(path, gguf, ggufName);
        if (heads > 0) {
          expect(relativeRmsError(original, values)).toBeGreaterThan(0.5); // really permuted
          values = permuteQueryKeyRows(values, folder.tensors.get(hfName)!.shape[0]!, heads, true);
        }
        expect(relativeRmsError(original, values)).toBeLessThanOrEqual(bound);
      }
    });
  }

  test("output.weight is Q6_K for q4_k when its rows hold whole blocks", () => {
    const gguf = readGgufFile(join(out, "llama-q4_k.gguf"));
    // the tiny model's output rows are hidden = 256 long
    expect(gguf.tensors.find((t) => t.name === "output.weight")!.type).toBe(GGML_TYPE.Q6_K);
  });

  test("qwen2 folder: biases, no permutation, tied embedding gets the output type", () => {
    const path = join(out, "qwen-q4_k.gguf");
    const run = runCli(["model", "quantize", qwen.path, path, "--type", "q4_k"]);
    expect(run.code).toBe(0);
    const gguf = readGgufFile(path);
    expect(metadataString(gguf.metadata, "general.architecture")).toBe("qwen2");
    const names = gguf.tensors.map((t) => t.name);
    expect(names).toContain("blk.0.attn_q.bias");
    expect(names).not.toContain("output.weight");
    expect(gguf.tensors.find((t) => t.name === "token_embd.weight")!.type).toBe(GGML_TYPE.Q6_K);
    const folder = openSafetensorsFolder(qwen.path);
    const q = tensorValues(path, gguf, "blk.0.attn_q.weight");
    expect(relativeRmsError(folder.readFloat32("model.layers.0.self_attn.q_proj.weight"), q)).toBeLessThan(0.1);
    const bias = tensorValues(path, gguf, "blk.0.attn_k.bias");
    expect(bias).toEqual(folder.readFloat32("model.layers.0.self_attn.k_proj.bias"));
  });

  test("GGUF in: re-quantized, metadata kept, file type updated", () => {
    const path = join(out, "requantized-q8_0.gguf");
    const run = runCli(["model", "quantize", join(out, "llama-f16.gguf"), path, "--type", "q8_0"]);
    expect(run.code).toBe(0);
    const gguf = readGgufFile(path);
    const source = readGgufFile(join(out, "llama-f16.gguf"));
    expect(metadataNumber(gguf.metadata, "general.file_type")).toBe(7);
    expect(gguf.metadata.get("tokenizer.ggml.tokens")).toEqual(source.metadata.get("tokenizer.ggml.tokens") as GgufValue);
    const original = openSafetensorsFolder(llama.path).readFloat32("model.layers.0.mlp.up_proj.weight");
    expect(relativeRmsError(original, tensorValues(path, gguf, "blk.0.ffn_up.weight"))).toBeLessThan(0.01);
  });

  test("bad arguments exit 2 with a clear message and leave no file", () => {
    const cases: [string[], RegExp][] = [
      [["model", "quantize", llama.path, join(out, "x.gguf")], /missing --type/],
      [["model", "quantize", llama.path, join(out, "x.gguf"), "--type", "q5_k"], /--type must be one of f32, f16, bf16, q8_0, q4_0, q4_k, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, got 'q5_k'/],
      [["model", "quantize", llama.path, "--type", "q8_0"], /expected IN and OUT/],
      [["model", "quantize", join(out, "none"), join(out, "x.gguf"), "--type", "q8_0"], /cannot read .*none: ENOENT/],
      [["model", "quantize", llama.path, join(out, "llama-f32.gguf"), "--type", "q8_0"], /exists; pass --force/],
      [["model", "quantize", llama.path, join(out, "missing-folder", "x.gguf"), "--type", "q8_0"], /folder .* does not exist/],
    ];
    for (const [args, message] of cases) {
      const run = runCli(args);
      expect(run.code).toBe(2);
      expect(run.stderr).toMatch(message);
    }
    expect(existsSync(join(out, "x.gguf"))).toBe(false);
  });

  test("unreadable inputs exit 2 naming the problem, leaving no partial OUT", () => {
    const broken = join(out, "broken");
    mkdirSync(broken);
    for (const name of readdirSync(llama.path)) writeFileSync(join(broken, name), readFileSync(join(llama.path, name)));
    const weights = readFileSync(join(llama.path, "model.safetensors"));
    writeFileSync(join(broken, "model.safetensors"), weights.subarray(0, weights.length - 100));
    let run = runCli(["model", "quantize", broken, join(out, "y.gguf"), "--type", "q8_0"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/model.safetensors/);
    const truncated = join(out, "truncated.gguf");
    const file = readFileSync(join(out, "llama-q8_0.gguf"));
    writeFileSync(truncated, file.subarray(0, file.length - 1000));
    run = runCli(["model", "quantize", truncated, join(out, "y.gguf"), "--type", "q4_k"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/tensor output.weight: data .* runs past the end of the file/);
    rmSync(join(broken, "tokenizer.json"));
    writeFileSync(join(broken, "model.safetensors"), weights);
    run = runCli(["model", "quantize", broken, join(out, "y.gguf"), "--type", "q8_0"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/tokenizer.json is missing/);
    expect(readdirSync(out).filter((name) => name.startsWith("y.gguf") || name.startsWith(".y.gguf"))).toEqual([]);
  });

  test("a failure after tensors were written (an integer tensor near the end) leaves no file", () => {
    const late = join(out, "late");
    mkdirSync(late);
    for (const name of readdirSync(llama.path)) writeFileSync(join(late, name), readFileSync(join(llama.path, name)));
    const file = readSafetensors(new Uint8Array(readFileSync(join(llama.path, "model.safetensors"))));
    const tensors = [...file.tensors.values()].map((t) => ({ name: t.name, dtype: t.name === "model.norm.weight" ? ("I32" as const) : t.dtype, shape: t.shape, data: t.data }));
    writeFileSync(join(late, "model.safetensors"), encodeSafetensors(tensors));
    const run = runCli(["model", "quantize", late, join(out, "late.gguf"), "--type", "q8_0", "--threads", "2"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/model.norm.weight: I32 is not a float dtype/);
    expect(readdirSync(out).filter((name) => name.includes("late.gguf"))).toEqual([]);
  });

  test("a split GGUF model (its first part) quantizes to the file its unsplit twin gives, tensor for tensor; a missing part is refused", () => {
    const shape = { hidden: 256, heads: 4, kvHeads: 2, ffn: 512, layers: 2, seed: 5 };
    const whole = writeRandomGguf("llama", join(out, "twin.gguf"), shape);
    writeRandomGguf("llama", join(out, "twin-split.gguf"), { ...shape, extraArgs: ["--split-max-tensors", "8"] });
    const first = join(out, "twin-split-00001-of-00003.gguf");
    for (const [input, output] of [[whole, "twin-q4_k_m.gguf"], [first, "twin-split-q4_k_m.gguf"]] as const) {
      const run = runCli(["model", "quantize", input, join(out, output), "--type", "q4_k_m", "--threads", "1"]);
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
    }
    const [a, b] = ["twin-q4_k_m.gguf", "twin-split-q4_k_m.gguf"].map((name) => readGgufFile(join(out, name)));
    expect(b!.metadata.has("split.count")).toBe(false);
    expect(b!.tensors.map((t) => `${t.name} ${t.type}`).sort()).toEqual(a!.tensors.map((t) => `${t.name} ${t.type}`).sort());
    for (const tensor of a!.tensors) {
      const twin = b!.tensors.find((t) => t.name === tensor.name)!;
      expect(Buffer.from(readGgufTensorData(join(out, "twin-split-q4_k_m.gguf"), twin)).equals(Buffer.from(readGgufTensorData(join(out, "twin-q4_k_m.gguf"), tensor)))).toBe(true);
    }
    rmSync(join(out, "twin-split-00003-of-00003.gguf"));
    const missing = runCli(["model", "quantize", first, join(out, "none.gguf"), "--type", "q8_0"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`part 3 of 3 of this split model is missing: ${join(out, "twin-split-00003-of-00003.gguf")}`);
  });
});
