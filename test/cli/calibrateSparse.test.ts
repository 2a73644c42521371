/**
 * `ctxr model calibrate-sparse` as a user runs it, on the tiny model and the real CPU runner:
 * thresholds and the serve flags in text or JSON, and the prompts file's and flags' errors.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BYTE_TOKENIZER_VOCAB } from "../../src/model/byteTokenizer.ts";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";

setDefaultTimeout(120_000);

let folder: { path: string; cleanup(): void };
let model: { path: string; cleanup(): void };
let env: Record<string, string> = {};

const PROMPTS = ['{"prompt": "The river floods the valley every spring."}', "", '{"prompt": "Once upon a time, in a mill by the bridge,"}'];

function promptsFile(name: string, lines: readonly string[]): string {
  const path = join(folder.path, name);
  writeFileSync(path, lines.join("\n") + "\n");
  return path;
}

const calibrate = (args: string[]) => runCli(["model", "calibrate-sparse", "--model", model.path, "--threads", "2", ...args], { env });

interface Calibration {
  prompts: number;
  decode_steps: number;
  windows: number;
  window: number;
  quantile: number;
  max_tokens: number;
  entropy_threshold: number;
  varentropy_threshold: number;
  serve_args: string[];
}

function calibrateJson(args: string[]): Calibration {
  const run = calibrate([...args, "--json"]);
  expect(run.stderr).toBe("");
  expect(run.code).toBe(0);
  return JSON.parse(run.stdout) as Calibration;
}

beforeAll(() => {
  env = { CTXR_RUNNER: buildRunner() };
  folder = tempFolder("ctxr-calibrate-sparse-");
  model = tinyModelFolder({ layers: 3, seed: 11 }, "tiny-calibrate");
}, 300_000);

afterAll(() => {
  model?.cleanup();
  folder?.cleanup();
});

describe("ctxr model calibrate-sparse", () => {
  test("prints finite positive thresholds and the ctxr serve flags that set them", () => {
    const run = calibrate(["--prompts", promptsFile("ok.jsonl", PROMPTS)]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    // Two prompts of 64 greedy tokens each (the tiny model never emits </s> this early): 49 windows of 16 apiece.
    expect(run.stdout).toContain("2 prompts, 128 decode steps, 98 windows of 16 steps; their 0.99 quantile:");
    const entropy = Number(/entropy threshold +(\S+) nats\n/.exec(run.stdout)?.[1]);
    const varentropy = Number(/varentropy threshold +(\S+) nats²\n/.exec(run.stdout)?.[1]);
    for (const value of [entropy, varentropy]) {
      expect(Number.isFinite(value)).toBe(true);
      expect(value).toBeGreaterThan(0);
    }
    // No distribution over the vocabulary has more entropy than the uniform one.
    expect(entropy).toBeLessThanOrEqual(Number(Math.log(BYTE_TOKENIZER_VOCAB).toPrecision(4)));
    const serve = run.stdout.split("\n").find((line) => line.trimStart().startsWith("ctxr serve "));
    expect(serve?.trim()).toBe(`ctxr serve --model ${model.path} --sparse-entropy-threshold ${entropy} --sparse-varentropy-threshold ${varentropy} --sparse-trigger-window 16`);
  });

  test("--json: the thresholds, the counts behind them and the serve arguments; deterministic", () => {
    const path = promptsFile("json.jsonl", PROMPTS);
    const result = calibrateJson(["--prompts", path, "--max-tokens", "20", "--window", "4", "--quantile", "0.9"]);
    expect(result).toMatchObject({ prompts: 2, decode_steps: 40, windows: 34, window: 4, quantile: 0.9, max_tokens: 20 });
    expect(result.entropy_threshold).toBeGreaterThan(0);
    expect(result.varentropy_threshold).toBeGreaterThan(0);
    expect(result.serve_args).toEqual([
      "--sparse-entropy-threshold",
      String(Number(result.entropy_threshold.toPrecision(4))),
      "--sparse-varentropy-threshold",
      String(Number(result.varentropy_threshold.toPrecision(4))),
      "--sparse-trigger-window",
      "4",
    ]);
    expect(calibrateJson(["--prompts", path, "--max-tokens", "20", "--window", "4", "--quantile", "0.9"])).toEqual(result);
    // The quantile's ends are the smallest and largest windowed means.
    const low = calibrateJson(["--prompts", path, "--max-tokens", "20", "--window", "4", "--quantile", "0"]);
    const high = calibrateJson(["--prompts", path, "--max-tokens", "20", "--window", "4", "--quantile", "1"]);
    expect(low.entropy_threshold).toBeLessThanOrEqual(result.entropy_threshold);
    expect(result.entropy_threshold).toBeLessThanOrEqual(high.entropy_threshold);
    expect(low.entropy_threshold).toBeLessThan(high.entropy_threshold);
    expect(low.varentropy_threshold).toBeLessThan(high.varentropy_threshold);
  });

  test("bad prompts files are refused with exit 2, naming the file and line", () => {
    const cases: [string, string][] = [
      [promptsFile("not-json.jsonl", [PROMPTS[0]!, "", "{prompt: nope}"]), "not-json.jsonl line 3: not valid JSON"],
      [promptsFile("no-prompt.jsonl", [PROMPTS[0]!, '{"text": "hello"}']), 'no-prompt.jsonl line 2: expected an object with a "prompt" string'],
      [promptsFile("number.jsonl", ['{"prompt": 7}']), 'number.jsonl line 1: expected an object with a "prompt" string'],
      [promptsFile("empty-prompt.jsonl", ['{"prompt": ""}']), 'empty-prompt.jsonl line 1: "prompt" is empty'],
      [promptsFile("empty.jsonl", ["", "  "]), "has no prompts"],
      [join(folder.path, "missing.jsonl"), `prompts file ${join(folder.path, "missing.jsonl")} does not exist`],
    ];
    for (const [path, message] of cases) {
      const run = calibrate(["--prompts", path]);
      expect({ path, code: run.code }).toEqual({ path, code: 2 });
      expect(run.stderr).toContain(`ctxr model calibrate-sparse: `);
      expect(run.stderr).toContain(message);
      expect(run.stdout).toBe("");
    }
  });

  test("too few decode steps to fill one window is a usage error saying how many were collected and needed", () => {
    const run = calibrate(["--prompts", promptsFile("short.jsonl", PROMPTS), "--max-tokens", "4", "--window", "8"]);
    expect(run.code).toBe(2);
    // Eight steps in all, but windows do not span prompts.
    expect(run.stderr).toContain("collected 8 decode steps (at most 4 from one prompt), but a window needs 8 consecutive steps of one prompt");
    expect(run.stdout).toBe("");
  });

  test("a prompt that cannot fit the model's positions with --max-tokens is refused, naming its line", () => {
    const short = tinyModelFolder({ maxPositions: 64 }, "tiny-64");
    try {
      const path = promptsFile("long.jsonl", [PROMPTS[0]!, JSON.stringify({ prompt: "x".repeat(50) })]);
      const run = runCli(["model", "calibrate-sparse", "--model", short.path, "--prompts", path, "--max-tokens", "20"], { env });
      expect(run.code).toBe(2);
      // 50 bytes and BOS.
      expect(run.stderr).toContain("long.jsonl line 2: the prompt has 51 tokens; with --max-tokens 20 it needs 71 positions, and the model has 64");
    } finally {
      short.cleanup();
    }
  });

  test("a GGUF file of the model (and a folder holding one) calibrates as its folder does; a damaged one is refused naming it", async () => {
    const path = promptsFile("gguf.jsonl", PROMPTS);
    const args = ["--prompts", path, "--max-tokens", "20", "--window", "4", "--quantile", "0.9", "--json"];
    const fromFolder = calibrateJson(args.slice(0, -1));
    const ggufDir = join(folder.path, "gguf-model");
    mkdirSync(ggufDir);
    const file = join(ggufDir, "tiny-calibrate.gguf");
    await quantizeModel({ input: model.path, output: file, type: "f32" });
    for (const target of [file, ggufDir]) {
      const run = runCli(["model", "calibrate-sparse", "--model", target, "--threads", "2", ...args], { env });
      expect(run.stderr).toBe("");
      expect(run.code).toBe(0);
      const result = JSON.parse(run.stdout) as Calibration & { model: string };
      expect(result.model).toBe(file);
      // The same weights in f32: the same greedy decodes, the same thresholds to the rounding of
      // the f16 KV cache the runner keeps for a GGUF file (--kv-dtype auto).
      expect(result).toMatchObject({ prompts: 2, decode_steps: 40, windows: 34 });
      expect(result.entropy_threshold).toBeCloseTo(fromFolder.entropy_threshold, 3);
      expect(result.varentropy_threshold).toBeCloseTo(fromFolder.varentropy_threshold, 3);
    }
    // A Q8_0 file runs too (quantized weights: thresholds near, not equal).
    const q8 = join(folder.path, "tiny-calibrate-q8_0.gguf");
    await quantizeModel({ input: model.path, output: q8, type: "q8_0" });
    const quantized = runCli(["model", "calibrate-sparse", "--model", q8, "--threads", "2", ...args], { env });
    expect(quantized.code).toBe(0);
    expect(JSON.parse(quantized.stdout)).toMatchObject({ prompts: 2, decode_steps: 40, windows: 34 });
    // Truncated: refused before any runner starts, naming the file.
    const damaged = join(folder.path, "damaged.gguf");
    writeFileSync(damaged, readFileSync(file).subarray(0, 100));
    const bad = runCli(["model", "calibrate-sparse", "--model", damaged, ...args], { env });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("ctxr model calibrate-sparse: ");
    expect(bad.stderr).toContain("damaged.gguf");
    expect(bad.stdout).toBe("");
    // A file that is not GGUF at all.
    const text = join(folder.path, "model.bin");
    writeFileSync(text, "not a model");
    const notGguf = runCli(["model", "calibrate-sparse", "--model", text, ...args], { env });
    expect(notGguf.code).toBe(1);
    expect(notGguf.stderr).toContain("is a file but not a .gguf file");
  });

  test("a model with sliding-window layers (gpt-oss: two KV groups) calibrates too", () => {
    const file = writeRandomGguf("gptoss", join(folder.path, "gptoss.gguf"), { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, ffn: 64, extraArgs: ["--sliding-window", "32"] });
    const long = JSON.stringify({ prompt: "the heart of a stone rests near the shore ".repeat(12) });
    const run = runCli(["model", "calibrate-sparse", "--model", file, "--threads", "2", "--prompts", promptsFile("gptoss.jsonl", [long]), "--max-tokens", "12", "--window", "4", "--json"], { env });
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const got = JSON.parse(run.stdout) as Calibration;
    expect(got.decode_steps).toBeGreaterThanOrEqual(4);
    for (const x of [got.entropy_threshold, got.varentropy_threshold]) expect(Number.isFinite(x) && x > 0).toBe(true);
  });

  test("bad flags are usage errors; a missing model folder is a failure; help is listed", () => {
    const prompts = promptsFile("flags.jsonl", PROMPTS);
    const cases: [string[], string][] = [
      [["model", "calibrate-sparse", "--prompts", prompts], "missing --model"],
      [["model", "calibrate-sparse", "--model", "m"], "missing --prompts"],
      [["model", "calibrate-sparse", "--model", "m", "--prompts", prompts, "--quantile", "1.5"], "--quantile must be a number from 0 to 1, got '1.5'"],
      [["model", "calibrate-sparse", "--model", "m", "--prompts", prompts, "--window", "0"], "--window must be a positive integer, got '0'"],
      [["model", "calibrate-sparse", "--model", "m", "--prompts", prompts, "--window", "5000"], "--window must be at most 4096 steps"],
      [["model", "calibrate-sparse", "--model", "m", "--prompts", prompts, "--max-tokens", "x"], "--max-tokens must be a positive integer, got 'x'"],
      [["model", "calibrate-sparse", "--model", "m", "--prompts", prompts, "--device", "tpu"], "--device must be cpu, cuda or cuda:N"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(args, { env });
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr model calibrate-sparse: ${message}`);
    }
    const missing = runCli(["model", "calibrate-sparse", "--model", join(folder.path, "no-model"), "--prompts", prompts], { env });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(`model folder ${join(folder.path, "no-model")} does not exist`);
    const help = runCli(["model", "calibrate-sparse", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain(".gguf");
    for (const flag of ["--model", "--prompts", "--max-tokens", "--quantile", "--window", "--threads", "--json", "--sparse-trigger-window"]) expect(help.stdout).toContain(flag);
    expect(runCli(["model", "--help"]).stdout).toContain("calibrate-sparse");
    expect(runCli(["--help"]).stdout).toContain("model calibrate-sparse");
  });
});
