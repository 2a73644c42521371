/**
 * Models by name through the real CLI: `ctxr model pull` and `ctxr serve --model hf:...`
 * against the loopback hub (HF_ENDPOINT), the cache in a temporary XDG_CACHE_HOME.
 * The CLI runs as a child process started asynchronously: the hub answers from this process.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { scriptCommand, spawnPiped } from "../../src/runtime/childProcess.ts";
import { CLI_ENTRY, REPO_ROOT, tempFolder } from "../helpers/cli.ts";
import { RUNNER_CPU } from "../helpers/engineKit.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";
import { LoopbackHub } from "../helpers/loopbackHub.ts";
import { servableTinyGguf, tinyModelFolderFiles } from "../helpers/servableGguf.ts";

const REPO = "test-org/tiny-llama-GGUF";
const FOLDER_REPO = "test-org/tiny-llama";
const SPLIT_REPO = "test-org/random-split-GGUF";
let hub: LoopbackHub;
let folder: { path: string; cleanup(): void };
let gguf: Uint8Array<ArrayBufferLike>;
let env: Record<string, string>;

const text = async (stream: ReadableStream<Uint8Array>): Promise<string> => new Response(stream).text();

/** Runs the CLI to its end without blocking this process's event loop (the hub answers from here). */
async function cli(args: string[], extraEnv: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawnPiped([...scriptCommand(CLI_ENTRY), ...args], { env: { ...process.env, ...env, ...extraEnv }, cwd: folder.path });
  child.stdin.end();
  const [stdout, stderr, code] = await Promise.all([text(child.stdout), text(child.stderr), child.exited]);
  return { code, stdout, stderr };
}

beforeAll(() => {
  hub = LoopbackHub.start();
  folder = tempFolder("ctxr-model-pull-");
  gguf = servableTinyGguf();
  hub.addRepo(FOLDER_REPO, { files: { ...tinyModelFolderFiles(), "README.md": "a tiny safetensors model\n" } });
  hub.addRepo(REPO, { files: { "README.md": "tiny\n", "tiny-llama-Q8_0.gguf": gguf, "tiny-llama-F16.gguf": gguf.slice(0, 1000) } });
  hub.addRepo(REPO, { revision: "v2", files: { "tiny-llama-Q8_0.gguf": "version two" } });
  env = { HF_ENDPOINT: hub.url, XDG_CACHE_HOME: join(folder.path, "cache"), CTXR_RUNNER: RUNNER_CPU, HF_TOKEN: "", CTXR_OFFLINE: "", HF_HUB_OFFLINE: "" };
}, 60_000);

afterAll(async () => {
  await hub.stop();
  folder.cleanup();
});

describe("ctxr model pull", () => {
  test("downloads into $XDG_CACHE_HOME/ctxr/models with plain progress lines; a second pull downloads nothing", async () => {
    const first = await cli(["model", "pull", `hf:${REPO}:Q8_0`]);
    expect(first.stderr).toContain("ctxr: downloading tiny-llama-Q8_0.gguf (");
    expect(first.stderr).toMatch(/ctxr: downloaded tiny-llama-Q8_0\.gguf: [\d.]+ MiB in [\d.]+ s; checking its checksum/);
    expect(first.code).toBe(0);
    const summary = JSON.parse(first.stdout.trimEnd().split("\n").at(-1)!);
    const path = join(folder.path, "cache", "ctxr", "models", "models--test-org--tiny-llama-GGUF", "snapshots", hub.commit(REPO), "tiny-llama-Q8_0.gguf");
    expect(summary).toEqual({ model: `hf:${REPO}:Q8_0`, repo: REPO, revision: "main", commit: hub.commit(REPO), kind: "gguf", path, files: [{ path: "tiny-llama-Q8_0.gguf", bytes: gguf.length }], fetched_bytes: gguf.length, source: "hub" });
    expect(new Uint8Array(readFileSync(path)) as Uint8Array<ArrayBufferLike>).toEqual(gguf);

    const second = await cli(["model", "pull", `hf:${REPO}:Q8_0`]);
    expect(second.code).toBe(0);
    expect(second.stderr).toBe("");
    expect(second.stdout).toContain("nothing downloaded");
    const offline = await cli(["model", "pull", `hf:${REPO}:Q8_0`, "--offline"]);
    expect(JSON.parse(offline.stdout.trimEnd().split("\n").at(-1)!)).toMatchObject({ path, source: "offline", fetched_bytes: 0 });
  }, 60_000);

  test("bad names, missing models and offline misses exit non-zero with a message", async () => {
    const bad = await cli(["model", "pull", "hf:just-a-name"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("ctxr model pull: 'hf:just-a-name': 'just-a-name' is not a repository name");
    const notHub = await cli(["model", "pull", "org/repo"]);
    expect(notHub.code).toBe(2);
    expect(notHub.stderr).toContain("'org/repo' is not a model on the hub: write hf:ORG/REPO[:QUANT|FILE]");
    const missing = await cli(["model", "pull", "hf:test-org/absent"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("ctxr model pull: test-org/absent: the hub answered 401");
    expect(missing.stderr).toContain("set HF_TOKEN to an access token");
    const offline = await cli(["model", "pull", `hf:${REPO}:F16`], { HF_HUB_OFFLINE: "1" });
    expect(offline.code).toBe(1);
    expect(offline.stderr).toContain(`offline (--offline, CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1): ${REPO}: no GGUF file carries the quantization 'F16' in the cache`);
    expect(offline.stderr).toContain(`ctxr model pull hf:${REPO}:F16`);
  }, 60_000);

  test("@REV pulls a branch into its own snapshot; --offline finds it; an unknown revision is named", async () => {
    const v2 = await cli(["model", "pull", `hf:${REPO}:Q8_0@v2`]);
    expect(v2.code).toBe(0);
    const summary = JSON.parse(v2.stdout.trimEnd().split("\n").at(-1)!);
    expect(summary.commit).toBe(hub.commit(REPO, "v2"));
    expect(summary.revision).toBe("v2");
    expect(summary.path).toBe(join(folder.path, "cache", "ctxr", "models", "models--test-org--tiny-llama-GGUF", "snapshots", hub.commit(REPO, "v2"), "tiny-llama-Q8_0.gguf"));
    expect(readFileSync(summary.path, "utf8")).toBe("version two");
    const offline = await cli(["model", "pull", `hf:${REPO}:Q8_0@v2`, "--offline"]);
    expect(JSON.parse(offline.stdout.trimEnd().split("\n").at(-1)!)).toMatchObject({ path: summary.path, source: "offline" });
    const unknown = await cli(["model", "pull", `hf:${REPO}@v9`]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain(`ctxr model pull: ${REPO} has no revision 'v9'`);
    const bad = await cli(["model", "pull", `hf:${REPO}@../x`]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("'../x' is not a branch, tag or commit name");
  }, 60_000);
});

/** Starts `ctxr serve --model <model>`, checks /v1/models and one chat completion, stops it; returns its stderr. */
async function serveAndAsk(model: string, id: string, cache: string): Promise<string> {
  const server = spawnPiped([...scriptCommand(CLI_ENTRY), "serve", "--in-memory", "--port", "0", "--model", model, "--kv-blocks", "32", "--threads", "1"], {
    env: { ...process.env, ...env, XDG_CACHE_HOME: cache },
    cwd: folder.path,
  });
  server.stdin.end();
  const stderr = text(server.stderr);
  try {
    let out = "";
    const reader = server.stdout.getReader();
    while (!out.includes("listening on")) {
      const { done, value } = await reader.read();
      if (done) throw new Error(`serve exited before listening: ${await stderr}`);
      out += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    const url = /listening on (http:\/\/\S+)/.exec(out)![1]!;
    const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((entry) => entry.id)).toEqual([id]);
    const answer = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: id, messages: [{ role: "user", content: "Hello" }], max_tokens: 3, temperature: 0 }),
    });
    expect(answer.status).toBe(200);
    const body = (await answer.json()) as { model: string; usage: { completion_tokens: number } };
    expect(body.model).toBe(id);
    expect(body.usage.completion_tokens).toBeGreaterThan(0);
  } finally {
    server.kill("SIGTERM");
    await server.exited;
  }
  return stderr;
}

describe("ctxr serve --model hf:...", () => {
  test("downloads a GGUF model by name, then serves it as ORG/REPO", async () => {
    const cache = join(folder.path, "serve-cache"); // its own cache: this run downloads
    const stderr = await serveAndAsk(`hf:${REPO}:q8_0`, REPO, cache);
    expect(stderr).toContain("ctxr: downloading tiny-llama-Q8_0.gguf (");
    expect(new Uint8Array(readFileSync(join(cache, "ctxr", "models", "models--test-org--tiny-llama-GGUF", "snapshots", hub.commit(REPO), "tiny-llama-Q8_0.gguf"))) as Uint8Array<ArrayBufferLike>).toEqual(gguf);
  }, 120_000);

  test("downloads a safetensors folder by name and serves it from the cache's snapshot", async () => {
    const cache = join(folder.path, "folder-cache");
    const stderr = await serveAndAsk(`hf:${FOLDER_REPO}`, FOLDER_REPO, cache);
    expect(stderr).toContain("ctxr: downloading model.safetensors (");
    const snapshot = join(cache, "ctxr", "models", "models--test-org--tiny-llama", "snapshots", hub.commit(FOLDER_REPO));
    expect(readdirSync(snapshot).sort()).toEqual(Object.keys(tinyModelFolderFiles()).sort()); // no README
  }, 120_000);

  test("pulls a GGUF model split in parts and serves it from its first part", async () => {
    const scratch = join(folder.path, "split-source");
    mkdirSync(scratch);
    writeRandomGguf("llama", join(scratch, "random.gguf"), { hidden: 64, heads: 4, kvHeads: 2, ffn: 128, extraArgs: ["--split-max-tensors", "8"] });
    const parts = readdirSync(scratch).sort();
    expect(parts).toEqual(["random-00001-of-00003.gguf", "random-00002-of-00003.gguf", "random-00003-of-00003.gguf"]);
    hub.addRepo(SPLIT_REPO, { files: Object.fromEntries(parts.map((part) => [part, new Uint8Array(readFileSync(join(scratch, part)))])) });
    const pulled = await cli(["model", "pull", `hf:${SPLIT_REPO}`]);
    expect(pulled.code).toBe(0);
    const summary = JSON.parse(pulled.stdout.trimEnd().split("\n").at(-1)!);
    expect(summary.files.map((file: { path: string }) => file.path)).toEqual(parts);
    expect(summary.path.endsWith(`/snapshots/${hub.commit(SPLIT_REPO)}/random-00001-of-00003.gguf`)).toBe(true);
    const stderr = await serveAndAsk(`hf:${SPLIT_REPO}`, SPLIT_REPO, join(folder.path, "cache"));
    expect(stderr).not.toContain("downloading"); // the pull put every part in the cache
  }, 120_000);

  test("--model ORG/REPO that is no local path hints at hf:; --offline needs a model by name", async () => {
    const hint = await cli(["serve", "--in-memory", "--port", "0", "--model", "meta-llama/Llama-3.2-1B-Instruct"]);
    expect(hint.code).not.toBe(0);
    expect(hint.stderr).toContain("for the model meta-llama/Llama-3.2-1B-Instruct on the Hugging Face Hub, write hf:meta-llama/Llama-3.2-1B-Instruct");
    const offline = await cli(["serve", "--in-memory", "--port", "0", "--offline", "--model", join(REPO_ROOT, "none.gguf")]);
    expect(offline.code).toBe(2);
    expect(offline.stderr).toContain("--offline applies to a model by name: it needs --model hf:ORG/REPO[:QUANT|FILE]");
    // CTXR_OFFLINE=1 (a deployment's standing setting) with a local model is no error: the model's own problem is told.
    const standing = await cli(["serve", "--in-memory", "--port", "0", "--model", join(REPO_ROOT, "none.gguf")], { CTXR_OFFLINE: "1" });
    expect(standing.code).not.toBe(0);
    expect(standing.stderr).not.toContain("--offline");
    expect(standing.stderr).toContain("none.gguf does not exist");
  }, 60_000);
});
