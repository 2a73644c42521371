/**
 * The README's four quick starts, run as a newcomer would copy them: its shell
 * blocks through bash (ctxr = this CLI), its `ctxr serve` lines as servers, its
 * openai-SDK examples with node, against the model it names (ctxr model tiny,
 * quantized to q8_0). What each printed must equal the output the README shows,
 * up to ids, timings, ports and paths.
 */
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { which } from "../../src/runtime/childProcess.ts";
import { REPO_ROOT, runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { spawnServer, type SpawnedServer } from "../server/serverKit.ts";

setDefaultTimeout(240_000);

interface Block {
  lang: string;
  body: string;
}

const README = readFileSync(join(REPO_ROOT, "README.md"), "utf8");
const start = README.indexOf("## Quick start");
const QUICK_START = README.slice(start, README.indexOf("\n## ", start + 1));
const USES = QUICK_START.split("\n### ").slice(1).map((use) => [...use.matchAll(/```(\w*)\n([\s\S]*?)```/g)].map((match): Block => ({ lang: match[1]!, body: match[2]! })));

/**
 * Ids, timings and the model's path vary from run to run; the rest must not. The tiny
 * model's text is left out too: its logits are nearly flat, so which noise it writes
 * depends on the CPU's kernels (AVX2, AVX-512) rounding.
 */
function normalized(text: string): string {
  return text
    .replace(/"content":"(?:[^"\\]|\\.)*"/g, '"content":"TEXT"')
    .replace(/^[^\n]*\n(\d+ prompt \+ \d+ completion tokens)$/m, "TEXT\n$1")
    .replace(/(chatcmpl-(ctxr-)?|ctxr-)[0-9a-f]{32}/g, "$1ID")
    .replace(/"(created|build_ms|parse_ms|write_ms|ttft_ms|queue_ms)":[0-9.]+/g, '"$1":N')
    .replace(/(ttft_ms|queue_ms): [0-9.]+/g, "$1: N")
    .replace(/ in [0-9.]+ ms;/g, " in N ms;")
    .replace(/from \S+tiny-q8_0\.gguf/g, "from tiny-q8_0.gguf")
    .trimEnd();
}

const folder = tempFolder("ctxr-readme-quick-start-");
const servers: SpawnedServer[] = [];
afterAll(async () => {
  for (const server of servers) server.kill("SIGTERM");
  await Promise.all(servers.map((server) => server.exited));
  folder.cleanup();
});

/** The README's ports, mapped to the ones this run's servers got. */
const ports = new Map<string, string>();

function withPorts(text: string): string {
  let result = text;
  for (const [readme, actual] of ports) result = result.replaceAll(`127.0.0.1:${readme}`, `127.0.0.1:${actual}`);
  return result;
}

async function serve(commandLine: string, readmePort: string, env: Record<string, string>): Promise<SpawnedServer> {
  const args = withPorts(commandLine).trim().split(/\s+/).slice(2);
  const portAt = args.indexOf("--port");
  if (portAt >= 0) args.splice(portAt, 2);
  const server = await spawnServer(args, env, 60_000, folder.path);
  servers.push(server);
  ports.set(readmePort, new URL(server.url).port);
  return server;
}

function runShell(script: string): string {
  const ctxr = `ctxr() { "${process.execPath}" "${join(REPO_ROOT, "src/cli/main.ts")}" "$@"; }\n`;
  const result = spawnSync("bash", ["-euo", "pipefail", "-c", ctxr + withPorts(script)], { cwd: folder.path, encoding: "utf8" });
  if (result.status !== 0) throw new Error(`bash failed (${result.status}): ${result.stderr}`);
  return result.stdout + result.stderr;
}

function runNode(source: string): string {
  const file = join(folder.path, "example.mjs");
  writeFileSync(file, withPorts(source));
  const result = spawnSync("node", [file], { cwd: folder.path, encoding: "utf8" });
  if (result.status !== 0) throw new Error(`node failed (${result.status}): ${result.stderr}`);
  return result.stdout;
}

function expectOutput(blocks: Block[], index: number, printed: string): void {
  expect(blocks[index + 1]?.lang).toBe("");
  expect(normalized(printed)).toBe(normalized(blocks[index + 1]!.body));
}

describe.skipIf(which("node") === null || which("curl") === null)("the README's quick starts, run as written", () => {
  test("offline index, reorder API, proxy in front of an OpenAI-compatible engine, a GGUF served", async () => {
    const env = { CTXR_RUNNER: buildRunner() };
    symlinkSync(join(REPO_ROOT, "node_modules"), join(folder.path, "node_modules"));
    expect(runCli(["model", "tiny", "--out", join(folder.path, "tiny")]).code).toBe(0);
    expect(runCli(["model", "quantize", join(folder.path, "tiny"), join(folder.path, "tiny-q8_0.gguf"), "--type", "q8_0"]).code).toBe(0);
    // The engine the README puts at port 8000 (vLLM there): the same OpenAI API, from ctxr's own engine.
    await serve("ctxr serve --model tiny-q8_0.gguf --served-model-name my-model --in-memory --threads 1", "8000", env);

    const [offline, online, proxy, gguf] = USES as [Block[], Block[], Block[], Block[]];
    const api = await serve(online.find((block) => block.body.startsWith("ctxr serve"))!.body, "8765", env);
    for (const [index, block] of offline.entries()) {
      if (block.lang === "sh") expectOutput(offline, index, runShell(block.body));
      if (block.lang === "js") expectOutput(offline, index, runNode(block.body));
    }
    for (const [index, block] of online.entries()) {
      if (block.lang === "sh" && !block.body.startsWith("ctxr serve")) expectOutput(online, index, runShell(block.body));
      if (block.lang === "js") expectOutput(online, index, runNode(block.body));
    }
    api.kill("SIGTERM");
    await api.exited;

    for (const uses of [proxy, gguf]) {
      const serveAt = uses.findIndex((block) => block.body.startsWith("ctxr serve"));
      const readmePort = /--port (\d+)/.exec(uses[serveAt]!.body)?.[1] ?? "8765";
      const server = await serve(uses[serveAt]!.body, readmePort, env);
      expect(normalized(withPorts(uses[serveAt + 1]!.body))).toBe(normalized(server.startLines.join("\n")));
      for (const [index, block] of uses.entries()) {
        if (block.lang === "sh" && index !== serveAt) expectOutput(uses, index, runShell(block.body));
        if (block.lang === "js") expectOutput(uses, index, runNode(block.body));
      }
    }
  });
});
