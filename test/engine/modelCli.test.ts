import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lastJsonLine, runCli, tempFolder } from "../helpers/cli.ts";

// These tests spawn processes; give them room on a busy machine.
setDefaultTimeout(120_000);

let folder: { path: string; cleanup(): void };
beforeAll(() => {
  folder = tempFolder("ctxr-model-cli-");
});
afterAll(() => folder.cleanup());

const FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"];

describe("ctxr model tiny", () => {
  test("writes the checkpoint and reports each file's size and sha256", () => {
    const out = join(folder.path, "nested", "tiny");
    const run = runCli(["model", "tiny", "--out", out, "--seed", "1"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("ctxr: wrote a tiny Llama model to");
    const summary = lastJsonLine(run.stdout) as { parameters: number; dtype: string; files: Record<string, { bytes: number; sha256: string }> };
    expect(summary.dtype).toBe("f32");
    expect(summary.parameters).toBe(107200);
    expect(readdirSync(out).sort()).toEqual(FILES);
    for (const name of FILES) {
      const bytes = readFileSync(join(out, name));
      expect(summary.files[name]).toEqual({ bytes: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") });
    }
    const config = JSON.parse(readFileSync(join(out, "config.json"), "utf8"));
    expect(config.num_hidden_layers).toBe(2);
  });

  test("size flags reach the config; --force overwrites a non-empty folder", () => {
    const out = join(folder.path, "sized");
    const args = ["model", "tiny", "--out", out, "--layers", "3", "--hidden", "48", "--heads", "6", "--kv-heads", "3", "--intermediate", "80", "--vocab", "300", "--dtype", "bf16"];
    expect(runCli(args).code).toBe(0);
    const config = JSON.parse(readFileSync(join(out, "config.json"), "utf8"));
    expect(config).toMatchObject({
      num_hidden_layers: 3,
      hidden_size: 48,
      num_attention_heads: 6,
      num_key_value_heads: 3,
      head_dim: 8,
      intermediate_size: 80,
      vocab_size: 300,
      torch_dtype: "bfloat16",
    });
    const again = runCli(args);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain("is not empty");
    expect(runCli([...args, "--force"]).code).toBe(0);
  });

  test("help is listed and printed", () => {
    expect(runCli(["--help"]).stdout).toContain("model tiny");
    for (const args of [["model", "tiny", "--help"], ["model", "--help"], ["help", "model", "tiny"]]) {
      const run = runCli(args);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain("Usage: ctxr model");
    }
    const bare = runCli(["model"]);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain("tiny");
  });

  const bad: [string, string[], string][] = [
    ["missing --out", [], "missing --out"],
    ["unknown option", ["--out", "X", "--layer", "2"], "unknown option --layer"],
    ["non-numeric", ["--out", "X", "--hidden", "abc"], "--hidden must be a positive integer, got 'abc'"],
    ["zero layers", ["--out", "X", "--layers", "0"], "--layers must be a positive integer, got '0'"],
    ["negative seed", ["--out", "X", "--seed=-1"], "--seed must be a non-negative integer, got '-1'"],
    ["fractional seed", ["--out", "X", "--seed", "1.5"], "--seed must be a non-negative integer"],
    ["small vocab", ["--out", "X", "--vocab", "100"], "--vocab must be an integer >= 259, got '100'"],
    ["bad dtype", ["--out", "X", "--dtype", "f8"], "--dtype must be one of f32, f16, bf16, got 'f8'"],
    ["heads not dividing hidden", ["--out", "X", "--heads", "5"], "hidden size 64 is not a multiple of the 5 attention heads"],
    ["kv heads not dividing heads", ["--out", "X", "--kv-heads", "3"], "4 attention heads are not a multiple of the 3 key/value heads"],
    ["odd head size", ["--out", "X", "--hidden", "12", "--heads", "4"], "head size 3 (hidden / heads) must be even"],
    ["bad rope scaling", ["--out", "X", "--rope-scaling", "yarn"], "--rope-scaling must be one of none, llama3"],
    ["zero rope theta", ["--out", "X", "--rope-theta", "0"], "--rope-theta must be a positive number"],
    ["zero attention gain", ["--out", "X", "--attention-gain", "0"], "--attention-gain must be a positive number"],
    ["word attention gain", ["--out", "X", "--attention-gain", "sharp"], "--attention-gain"],
    ["a value for a boolean flag", ["--out", "X", "--qkv-bias=yes"], "qkv-bias"],
  ];
  for (const [name, args, message] of bad) {
    test(`bad flags: ${name} → exit 2, nothing written`, () => {
      const cwd = join(folder.path, `bad-${name.replace(/\W+/g, "-")}`);
      mkdirSync(cwd);
      const run = runCli(["model", "tiny", ...args], { cwd });
      expect(run.code).toBe(2);
      expect(run.stdout).toBe("");
      expect(run.stderr).toContain(message);
      expect(existsSync(join(cwd, "X"))).toBe(false);
    });
  }

  test("an output path that is a file → exit 2", () => {
    const file = join(folder.path, "a-file");
    writeFileSync(file, "x");
    const run = runCli(["model", "tiny", "--out", file]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("exists and is not a folder");
  });
});
