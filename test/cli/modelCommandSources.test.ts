/**
 * The model subcommands' options from CTXR_<OPTION> and --config FILE, as serve's: the command
 * line wins over the environment, which wins over the file; bad values name where they came from.
 * Through the real CLI.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { metadataNumber } from "../../src/model/gguf/ggufMetadata.ts";
import { lastJsonLine, runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

let folder: { path: string; cleanup(): void };
let model: { path: string; cleanup(): void };
// Nothing from the test runner's own environment leaks in.
const CLEAN = { CTXR_CONFIG: "", CTXR_OFFLINE: "", HF_HUB_OFFLINE: "", CTXR_LAYERS: "", CTXR_HIDDEN: "", CTXR_SEED: "", CTXR_TYPE: "", CTXR_THREADS: "", CTXR_FORCE: "" };

function file(name: string, content: string): string {
  const path = join(folder.path, name);
  writeFileSync(path, content);
  return path;
}

const tiny = (args: string[], env: Record<string, string> = {}) => runCli(["model", "tiny", ...args], { env: { ...CLEAN, ...env } });
const layersOf = (run: { stdout: string }) => Number(/(\d+) layers/.exec(run.stdout)![1]);

beforeAll(() => {
  folder = tempFolder("ctxr-model-sources-");
  model = tinyModelFolder({ layers: 2, seed: 3 }, "sources-model");
});

afterAll(() => {
  model.cleanup();
  folder.cleanup();
});

describe("ctxr model tiny", () => {
  test("command line > CTXR_<OPTION> > --config file > default", () => {
    const config = file("tiny.yaml", "layers: 5\nseed: 9\nhidden: 32\nheads: 2\nkv-heads: 1\n");
    const fromFile = tiny(["--out", join(folder.path, "a"), "--config", config]);
    expect(fromFile.stderr).toBe("");
    expect(fromFile.code).toBe(0);
    expect(layersOf(fromFile)).toBe(5);
    expect(fromFile.stdout).toContain("seed 9");
    expect(lastJsonLine(fromFile.stdout).seed).toBe(9);

    const fromEnv = tiny(["--out", join(folder.path, "b"), "--config", config], { CTXR_LAYERS: "4" });
    expect(layersOf(fromEnv)).toBe(4);
    expect(fromEnv.stdout).toContain("seed 9");

    const fromCli = tiny(["--out", join(folder.path, "c"), "--config", config, "--layers", "3"], { CTXR_LAYERS: "4" });
    expect(layersOf(fromCli)).toBe(3);

    const byEnvConfig = tiny(["--out", join(folder.path, "d")], { CTXR_CONFIG: config });
    expect(layersOf(byEnvConfig)).toBe(5);

    const defaults = tiny(["--out", join(folder.path, "e")]);
    expect(layersOf(defaults)).toBe(2);

    // A switch from the environment: --force lets it write over the folder written above.
    expect(tiny(["--out", join(folder.path, "e")]).code).toBe(2);
    expect(tiny(["--out", join(folder.path, "e")], { CTXR_FORCE: "1" }).code).toBe(0);
    // CTXR_OUT sets the required --out.
    expect(tiny([], { CTXR_OUT: join(folder.path, "f") }).code).toBe(0);
  });

  test("bad values name their source; unknown keys name the file", () => {
    const env = tiny(["--out", join(folder.path, "g")], { CTXR_LAYERS: "many" });
    expect(env.code).toBe(2);
    expect(env.stderr).toContain("ctxr model tiny: CTXR_LAYERS=many: --layers");
    const badFile = file("bad.json", JSON.stringify({ layers: "x" }));
    const fromFile = tiny(["--out", join(folder.path, "g"), "--config", badFile]);
    expect(fromFile.code).toBe(2);
    expect(fromFile.stderr).toContain(`ctxr model tiny: ${badFile}: layers: --layers`);
    const unknown = file("serve.yaml", "port: 9000\n");
    const wrongCommand = tiny(["--out", join(folder.path, "g"), "--config", unknown]);
    expect(wrongCommand.code).toBe(2);
    expect(wrongCommand.stderr).toContain(`${unknown}: unknown key 'port' (ctxr model tiny has no --port)`);
    const switchWord = tiny(["--out", join(folder.path, "g")], { CTXR_FORCE: "maybe" });
    expect(switchWord.code).toBe(2);
    expect(switchWord.stderr).toContain("CTXR_FORCE=maybe: --force is a switch");
    const missing = tiny(["--out", join(folder.path, "g"), "--config", join(folder.path, "none.yaml")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("none.yaml: cannot read it (ENOENT)");
  });
});

describe("ctxr model quantize, pull and calibrate-sparse", () => {
  test("quantize: --type from CTXR_TYPE or the file, the command line first; a bad one names its source", () => {
    const out = join(folder.path, "q.gguf");
    const config = file("quantize.json", JSON.stringify({ type: "q8_0", threads: 1, force: true }));
    const fromFile = runCli(["model", "quantize", model.path, out, "--config", config], { env: CLEAN });
    expect(fromFile.stderr).toBe("");
    expect(fromFile.code).toBe(0);
    expect(lastJsonLine(fromFile.stdout).type).toBe("q8_0");
    const fromEnv = runCli(["model", "quantize", model.path, out, "--config", config], { env: { ...CLEAN, CTXR_TYPE: "f16" } });
    expect(lastJsonLine(fromEnv.stdout).type).toBe("f16");
    const fromCli = runCli(["model", "quantize", model.path, out, "--config", config, "--type", "q4_0"], { env: { ...CLEAN, CTXR_TYPE: "f16" } });
    expect(lastJsonLine(fromCli.stdout).type).toBe("q4_0");
    expect(metadataNumber(readGgufFile(out).metadata, "llama.block_count")).toBe(2);
    const bad = runCli(["model", "quantize", model.path, out, "--force"], { env: { ...CLEAN, CTXR_TYPE: "q3" } });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("ctxr model quantize: CTXR_TYPE=q3: --type must be one of");
  });

  test("pull: --offline from the file; an unknown key is refused", () => {
    const config = file("pull.yaml", "offline: true\n");
    const cache = join(folder.path, "cache");
    const offline = runCli(["model", "pull", "hf:test-org/not-cached", "--config", config], { env: { ...CLEAN, XDG_CACHE_HOME: cache, HF_ENDPOINT: "http://127.0.0.1:9" } });
    expect(offline.code).toBe(1);
    expect(offline.stderr).toContain("ctxr model pull: offline (--offline, CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1): the cache has no copy of test-org/not-cached");
    const unknown = runCli(["model", "pull", "hf:test-org/x", "--config", file("pull-bad.yaml", "type: q8_0\n")], { env: CLEAN });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown key 'type' (ctxr model pull has no --type)");
  });

  test("calibrate-sparse: --model and --prompts from the environment, --max-tokens from the file", () => {
    const prompts = file("prompts.jsonl", '{"prompt": "A mill by the bridge."}\n');
    const config = file("calibrate.yaml", "max-tokens: 9\nwindow: 3\njson: true\n");
    const run = runCli(["model", "calibrate-sparse", "--config", config, "--threads", "1"], {
      env: { ...CLEAN, CTXR_RUNNER: buildRunner(), CTXR_MODEL: model.path, CTXR_PROMPTS: prompts },
    });
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const result = lastJsonLine(run.stdout);
    expect(result).toMatchObject({ model: model.path, max_tokens: 9, window: 3, prompts: 1 });
    const bad = runCli(["model", "calibrate-sparse", "--config", config], { env: { ...CLEAN, CTXR_MODEL: model.path, CTXR_PROMPTS: prompts, CTXR_QUANTILE: "2" } });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("ctxr model calibrate-sparse: CTXR_QUANTILE=2: --quantile");
  });
});
