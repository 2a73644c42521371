import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { resolveModelSource } from "../../src/model/modelSource.ts";
import { tempFolder } from "../helpers/cli.ts";

let folder: { path: string; cleanup(): void };
const make = (dir: string, files: string[]): string => {
  const path = join(folder.path, dir);
  mkdirSync(path, { recursive: true });
  for (const file of files) writeFileSync(join(path, file), "x");
  return path;
};

beforeAll(() => {
  folder = tempFolder("ctxr-model-source-");
});
afterAll(() => folder.cleanup());

describe("resolveModelSource", () => {
  test("a split GGUF model: its first part, or a folder of its parts, named without the part suffix", () => {
    const dir = make("split-folder", ["Qwen3-8B-Q4_K_M-00001-of-00003.gguf", "Qwen3-8B-Q4_K_M-00002-of-00003.gguf", "Qwen3-8B-Q4_K_M-00003-of-00003.gguf", "README.md"]);
    const first = join(dir, "Qwen3-8B-Q4_K_M-00001-of-00003.gguf");
    expect(resolveModelSource(dir)).toEqual({ kind: "gguf", path: first, name: "Qwen3-8B-Q4_K_M" });
    expect(resolveModelSource(first)).toEqual({ kind: "gguf", path: first, name: "Qwen3-8B-Q4_K_M" });
    const two = make("two-splits", ["a-00001-of-00002.gguf", "a-00002-of-00002.gguf", "b-00001-of-00002.gguf", "b-00002-of-00002.gguf"]);
    expect(() => resolveModelSource(two)).toThrow("holds 2 GGUF files (a-00001-of-00002.gguf, b-00001-of-00002.gguf)");
    const headless = make("headless", ["a-00002-of-00002.gguf"]);
    expect(() => resolveModelSource(headless)).toThrow("holds parts of a split GGUF model (a-00002-of-00002.gguf) but not its first part");
  });

  test("a Hugging Face folder, a .gguf file, a folder with one .gguf (named by the file)", () => {
    const hf = make("hf-model", ["config.json", "model.safetensors", "tokenizer.json"]);
    expect(resolveModelSource(hf)).toEqual({ kind: "folder", path: hf, name: "hf-model" });
    const dir = make("gguf-folder", ["Llama-3.2-1B.Q4_K_M.GGUF", "README.md"]);
    expect(resolveModelSource(join(dir, "Llama-3.2-1B.Q4_K_M.GGUF"))).toEqual({ kind: "gguf", path: join(dir, "Llama-3.2-1B.Q4_K_M.GGUF"), name: "Llama-3.2-1B.Q4_K_M" });
    expect(resolveModelSource(dir)).toEqual({ kind: "gguf", path: join(dir, "Llama-3.2-1B.Q4_K_M.GGUF"), name: "Llama-3.2-1B.Q4_K_M" });
    // config.json next to one .gguf file: the GGUF file is the model.
    const both = make("gguf-and-config", ["config.json", "m.gguf"]);
    expect(resolveModelSource(both).kind).toBe("gguf");
  });

  test("errors name what is wrong", () => {
    expect(() => resolveModelSource(join(folder.path, "missing"))).toThrow(/model folder .*missing does not exist/);
    expect(() => resolveModelSource(join(folder.path, "missing.gguf"))).toThrow(/model file .*missing\.gguf does not exist/);
    const dir = make("files", ["weights.bin"]);
    expect(() => resolveModelSource(join(dir, "weights.bin"))).toThrow(/is a file but not a \.gguf file/);
    expect(() => resolveModelSource(make("two", ["b.gguf", "a.gguf"]))).toThrow(/holds 2 GGUF files \(a\.gguf, b\.gguf\); give --model the one to serve/);
    expect(() => resolveModelSource(make("mixed", ["m.gguf", "model-00001.safetensors", "model-00002.safetensors"]))).toThrow(
      /holds both a GGUF file \(m\.gguf\) and safetensors files \(model-00001\.safetensors, model-00002\.safetensors\)/,
    );
    expect(() => resolveModelSource(make("empty", ["notes.txt"]))).toThrow(/has no config\.json and no \.gguf file/);
  });
});
