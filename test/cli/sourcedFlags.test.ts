/** `ctxr serve` and `ctxr index build` configured through CTXR_<FLAG> and --config FILE, end to end. */
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runCli, tempFolder } from "../helpers/cli.ts";
import { spawnServer, type SpawnedServer } from "../server/serverKit.ts";

setDefaultTimeout(60_000);

const folder = tempFolder("ctxr-sourced-flags-");
afterAll(() => folder.cleanup());

function file(name: string, text: string): string {
  const path = join(folder.path, name);
  writeFileSync(path, text);
  return path;
}

/** n contexts of two documents each. */
function contexts(n: number): { contexts: number[][] } {
  return { contexts: Array.from({ length: n }, (_, i) => [i, i + 100]) };
}

async function stopped(server: SpawnedServer): Promise<void> {
  server.kill("SIGTERM");
  await server.exited;
}

describe("serve options from the environment and a config file", () => {
  test("precedence: command line > CTXR_<FLAG> > --config > default, seen through the HTTP API", async () => {
    const config = file("serve.yaml", "in_memory: true\nmax-contexts: 1\napi-key: key-from-the-config-file\n");
    const fileOnly = await spawnServer(["--config", config]);
    try {
      expect(fileOnly.startLines.at(-1)).toContain("(data: memory)");
      expect((await fileOnly.post("/v1/reorder", contexts(1))).status).toBe(401);
      const headers = { authorization: "Bearer key-from-the-config-file" };
      expect((await fileOnly.post("/v1/reorder", contexts(1), headers)).status).toBe(200);
      const tooMany = await fileOnly.post("/v1/reorder", contexts(2), headers);
      expect(tooMany.status).toBe(400);
    } finally {
      await stopped(fileOnly);
    }

    const envOverFile = await spawnServer(["--config", config], { CTXR_MAX_CONTEXTS: "2", CTXR_API_KEY: "key-from-the-environment" });
    try {
      const headers = { authorization: "Bearer key-from-the-environment" };
      expect((await envOverFile.post("/v1/reorder", contexts(2), headers)).status).toBe(200);
      expect((await envOverFile.post("/v1/reorder", contexts(3), headers)).status).toBe(400);
    } finally {
      await stopped(envOverFile);
    }

    const cliOverEnv = await spawnServer(["--config", config, "--max-contexts", "3", "--api-key", "key-from-the-command-line"], { CTXR_MAX_CONTEXTS: "2", CTXR_API_KEY: "key-from-the-environment" });
    try {
      expect((await cliOverEnv.post("/v1/reorder", contexts(3), { authorization: "Bearer key-from-the-environment" })).status).toBe(401);
      expect((await cliOverEnv.post("/v1/reorder", contexts(3), { authorization: "Bearer key-from-the-command-line" })).status).toBe(200);
    } finally {
      await stopped(cliOverEnv);
    }
  });

  test("CTXR_CONFIG names the config file; a JSON file works too", async () => {
    const config = file("serve.json", JSON.stringify({ "in-memory": true, max_contexts: 1 }));
    const server = await spawnServer([], { CTXR_CONFIG: config });
    try {
      expect(server.startLines.at(-1)).toContain("(data: memory)");
      expect((await server.post("/v1/reorder", contexts(2))).status).toBe(400);
    } finally {
      await stopped(server);
    }
  });

  test("bad values, bad keys and unreadable files: exit 2 with a message naming the source", () => {
    const cases: [string[], Record<string, string>, string][] = [
      [["index", "build", "--input", "x", "--output", "y"], { CTXR_ALPHA: "abc" }, "ctxr index build: CTXR_ALPHA=abc: --alpha must be a non-negative number, got 'abc'"],
      [["serve", "--in-memory", "--port", "0"], { CTXR_MAX_CONTEXTS: "abc" }, "ctxr serve: CTXR_MAX_CONTEXTS=abc: --max-contexts must be a positive integer, got 'abc'"],
      [["serve", "--in-memory"], { CTXR_PORT: "abc" }, "ctxr serve: CTXR_PORT=abc: --port must be a non-negative integer, got 'abc'"],
      [["serve", "--in-memory", "--config", file("bad-port.json", '{"port": "abc"}')], {}, `ctxr serve: ${join(folder.path, "bad-port.json")}: port: --port must be a non-negative integer, got 'abc'`],
      [["serve", "--port", "0", "--config", file("bad-key.yaml", "in-memory: true\nprot: 80\n")], {}, `ctxr serve: ${join(folder.path, "bad-key.yaml")}: unknown key 'prot' (ctxr serve has no --prot)`],
      [["serve", "--port", "0", "--config", file("bad-switch.yaml", "in-memory: maybe\n")], {}, `bad-switch.yaml: in-memory: --in-memory is a switch: expected true or false, got string "maybe"`],
      [["serve", "--port", "0", "--config", file("bad.json", "{in-memory: true")], {}, "bad.json: not valid JSON"],
      [["serve", "--port", "0", "--config", join(folder.path, "missing.yaml")], {}, `ctxr serve: --config ${join(folder.path, "missing.yaml")}: cannot read it (ENOENT)`],
      [["serve", "--in-memory", "--port", "0"], { CTXR_ENGINE: "vllm" }, "ctxr serve: CTXR_ENGINE=vllm: --engine needs --upstream"],
      [["serve", "--port", "0"], { CTXR_IN_MEMORY: "perhaps" }, "ctxr serve: CTXR_IN_MEMORY=perhaps: --in-memory is a switch"],
      [["index", "build", "--input", "x", "--output", "y"], { CTXR_METHOD: "magic" }, "ctxr index build: CTXR_METHOD=magic: --method must be one of auto, cluster, trie, got 'magic'"],
    ];
    for (const [args, env, message] of cases) {
      const run = runCli(args, { env, cwd: folder.path });
      expect({ args, env, code: run.code }).toEqual({ args, env, code: 2 });
      expect(run.stderr).toContain(message);
      expect(run.stdout).toBe("");
    }
  });

  test("CTXR_UPSTREAM_KEY in a shared environment does not stop a server that proxies nothing", async () => {
    const server = await spawnServer(["--in-memory"], { CTXR_UPSTREAM_KEY: "sk-an-upstream-key-for-another-server" });
    try {
      expect((await server.get("/healthz")).status).toBe(200);
    } finally {
      await stopped(server);
    }
  });

  test("index build takes its options from the environment and --config, and the old --block-tokens with a note", () => {
    const input = file("contexts.jsonl", "[1, 2, 3]\n[2, 3, 4]\n[1, 2, 5]\n");
    const output = join(folder.path, "schedule.jsonl");
    const config = file("build.yaml", `input: ${input}\noutput: ${output}\ndocument-tokens: 16\n`);
    const fromFile = runCli(["index", "build", "--config", config]);
    expect(fromFile.code).toBe(0);
    expect(fromFile.stdout).toContain("16 tokens a document");
    expect(readFileSync(output, "utf8").trim().split("\n")).toHaveLength(3);
    const fromEnv = runCli(["index", "build", "--config", config], { env: { CTXR_DOCUMENT_TOKENS: "32" } });
    expect(fromEnv.stdout).toContain("32 tokens a document");
    const oldName = runCli(["index", "build", "--config", config, "--block-tokens", "64"], { env: { CTXR_DOCUMENT_TOKENS: "32" } });
    expect(oldName.code).toBe(0);
    expect(oldName.stdout).toContain("64 tokens a document");
    expect(oldName.stderr).toContain("ctxr index build: note: --block-tokens is an old name of --document-tokens");
  });
});
