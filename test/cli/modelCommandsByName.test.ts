/**
 * `ctxr model quantize` and `ctxr model calibrate-sparse` take a model by name, hf:ORG/REPO...,
 * through the same cache and download as serve and pull: the real CLI against the loopback hub
 * (HF_ENDPOINT), the cache in a temporary XDG_CACHE_HOME. The CLI runs as a child process started
 * asynchronously: the hub answers from this process.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { scriptCommand, spawnPiped } from "../../src/runtime/childProcess.ts";
import { CLI_ENTRY, tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { LoopbackHub } from "../helpers/loopbackHub.ts";
import { servableTinyGguf } from "../helpers/servableGguf.ts";

setDefaultTimeout(120_000);

const GGUF_REPO = "test-org/tiny-GGUF";
// Named as the local folder: a folder's general.name is its name, a model by name's its repository's, so the two files are byte-equal.
const FOLDER_REPO = "test-org/by-name-local";
let hub: LoopbackHub;
let folder: { path: string; cleanup(): void };
let local: { path: string; cleanup(): void };
let gguf: Uint8Array;
let env: Record<string, string>;

const text = async (stream: ReadableStream<Uint8Array>): Promise<string> => new Response(stream).text();

async function cli(args: string[], extraEnv: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawnPiped([...scriptCommand(CLI_ENTRY), ...args], { env: { ...process.env, ...env, ...extraEnv }, cwd: folder.path });
  child.stdin.end();
  const [stdout, stderr, code] = await Promise.all([text(child.stdout), text(child.stderr), child.exited]);
  return { code, stdout, stderr };
}

const lastJson = (stdout: string): Record<string, unknown> => JSON.parse(stdout.trimEnd().split("\n").at(-1)!) as Record<string, unknown>;

beforeAll(() => {
  hub = LoopbackHub.start();
  folder = tempFolder("ctxr-model-by-name-");
  local = tinyModelFolder({ layers: 2, seed: 5 }, "by-name-local");
  gguf = servableTinyGguf();
  const folderFiles = Object.fromEntries(readdirSync(local.path).map((name) => [name, new Uint8Array(readFileSync(join(local.path, name)))]));
  hub.addRepo(FOLDER_REPO, { files: folderFiles });
  hub.addRepo(GGUF_REPO, { files: { "tiny-Q8_0.gguf": gguf } });
  env = { HF_ENDPOINT: hub.url, XDG_CACHE_HOME: join(folder.path, "cache"), CTXR_RUNNER: buildRunner(), HF_TOKEN: "", CTXR_OFFLINE: "", HF_HUB_OFFLINE: "", CTXR_CONFIG: "" };
}, 300_000);

afterAll(async () => {
  await hub.stop();
  local.cleanup();
  folder.cleanup();
});

describe("ctxr model quantize hf:...", () => {
  test("a safetensors repository by name quantizes to the bytes its local folder gives; --offline then reads the cache alone", async () => {
    const fromHub = join(folder.path, "hub-q8.gguf");
    const run = await cli(["model", "quantize", `hf:${FOLDER_REPO}`, fromHub, "--type", "q8_0", "--threads", "1"]);
    expect(run.code).toBe(0);
    expect(run.stderr).toContain("ctxr: downloading model.safetensors (");
    const fromFolder = join(folder.path, "local-q8.gguf");
    expect((await cli(["model", "quantize", local.path, fromFolder, "--type", "q8_0", "--threads", "1"])).code).toBe(0);
    expect(readFileSync(fromHub).equals(readFileSync(fromFolder))).toBe(true);

    const cdnGets = hub.count("cdn", "GET");
    const offline = await cli(["model", "quantize", `hf:${FOLDER_REPO}`, join(folder.path, "offline-q8.gguf"), "--type", "q8_0", "--offline"], { HF_ENDPOINT: "http://127.0.0.1:9" });
    expect(offline.stderr).toBe("");
    expect(offline.code).toBe(0);
    expect(hub.count("cdn", "GET")).toBe(cdnGets);
  });

  test("a GGUF file by quantization re-quantizes; a missing file or an offline miss exits 1 naming it", async () => {
    const out = join(folder.path, "requantized.gguf");
    const run = await cli(["model", "quantize", `hf:${GGUF_REPO}:Q8_0`, out, "--type", "q4_0"]);
    expect(run.code).toBe(0);
    expect(lastJson(run.stdout)).toMatchObject({ out, type: "q4_0" });
    const missing = await cli(["model", "quantize", `hf:${GGUF_REPO}:Q2_K`, join(folder.path, "x.gguf"), "--type", "q8_0"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(`ctxr model quantize: ${GGUF_REPO}: no GGUF file carries the quantization 'Q2_K'`);
    const offline = await cli(["model", "quantize", `hf:${GGUF_REPO}:Q8_0@v2`, join(folder.path, "y.gguf"), "--type", "q8_0", "--offline"]);
    expect(offline.code).toBe(1);
    expect(offline.stderr).toContain(`the cache has no copy of ${GGUF_REPO} (revision v2)`);
  });

  test("--offline on the command line needs a model by name; CTXR_OFFLINE=1 with a local path is no error", async () => {
    const typed = await cli(["model", "quantize", local.path, join(folder.path, "z.gguf"), "--type", "q8_0", "--offline"]);
    expect(typed.code).toBe(2);
    expect(typed.stderr).toContain(`ctxr model quantize: --offline applies to a model by name, hf:ORG/REPO[:QUANT|FILE][@REV]; '${local.path}' is a local path`);
    const standing = await cli(["model", "quantize", local.path, join(folder.path, "z.gguf"), "--type", "q8_0"], { CTXR_OFFLINE: "1" });
    expect(standing.stderr).toBe("");
    expect(standing.code).toBe(0);
  });
});

describe("ctxr model calibrate-sparse --model hf:...", () => {
  test("calibrates the model by name as its local folder; --offline from the cache", async () => {
    const prompts = join(folder.path, "prompts.jsonl");
    writeFileSync(prompts, '{"prompt": "The river floods the valley every spring."}\n');
    const args = ["--prompts", prompts, "--max-tokens", "12", "--window", "4", "--threads", "1", "--json"];
    const byName = await cli(["model", "calibrate-sparse", "--model", `hf:${FOLDER_REPO}`, ...args]);
    expect(byName.code).toBe(0);
    const byPath = await cli(["model", "calibrate-sparse", "--model", local.path, ...args]);
    expect(byPath.code).toBe(0);
    const [named, path] = [lastJson(byName.stdout), lastJson(byPath.stdout)];
    expect(named.entropy_threshold).toBe(path.entropy_threshold);
    expect(named.varentropy_threshold).toBe(path.varentropy_threshold);
    expect(named.model).toBe(join(folder.path, "cache", "ctxr", "models", "models--test-org--by-name-local", "snapshots", hub.commit(FOLDER_REPO)));

    const offline = await cli(["model", "calibrate-sparse", "--model", `hf:${FOLDER_REPO}`, "--offline", ...args], { HF_ENDPOINT: "http://127.0.0.1:9" });
    expect(offline.code).toBe(0);
    expect(lastJson(offline.stdout).entropy_threshold).toBe(path.entropy_threshold);
    const text = await cli(["model", "calibrate-sparse", "--model", `hf:${FOLDER_REPO}`, ...args.slice(0, -1)]);
    expect(text.stdout).toContain(`ctxr serve --model hf:${FOLDER_REPO} --sparse-entropy-threshold`);
  });

  test("an unknown repository exits 1 with the hub's answer", async () => {
    const prompts = join(folder.path, "prompts.jsonl");
    const run = await cli(["model", "calibrate-sparse", "--model", "hf:test-org/absent", "--prompts", prompts]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain("ctxr model calibrate-sparse: test-org/absent: the hub answered 401");
  });
});
