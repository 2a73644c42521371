/**
 * The single binary: `bun build --compile` (what `npm run build` does), copied to
 * another folder, must run on its own. Compiles once (a few seconds to tens of seconds, depending on the machine).
 */
import { decode } from "@msgpack/msgpack";
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CLI_ENTRY, REPO_ROOT, lastJsonLine, runProgram, tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { FakeEngine } from "../helpers/fakeEngine/fakeEngine.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";
import { WORKER_ENTRIES } from "../../src/workerEntries.ts";

// These tests spawn processes; give them room on a busy machine.
setDefaultTimeout(120_000);

const packageVersion = (JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { version: string }).version;
const binaryName = process.platform === "win32" ? "ctxr.exe" : "ctxr";

describe("compiled binary", () => {
  let buildFolder: { path: string; cleanup(): void };
  let runFolder: { path: string; cleanup(): void };
  let binary = "";
  let buildLog = "";

  beforeAll(() => {
    buildFolder = tempFolder("ctxr-build-");
    runFolder = tempFolder("ctxr-run-");
    const built = join(buildFolder.path, binaryName);
    // Same flags and worker entries as `npm run build` (the runners it embeds are tested in test/runner); bun itself is process.execPath under bun test.
    const build = runProgram([process.execPath, "build", CLI_ENTRY, ...WORKER_ENTRIES, "--compile", "--minify", "--outfile", built], { cwd: REPO_ROOT });
    buildLog = `exit ${build.code}\n${build.stdout}\n${build.stderr}`;
    if (build.code === 0 && existsSync(built)) {
      binary = join(runFolder.path, binaryName);
      copyFileSync(built, binary);
      runProgram(["chmod", "+x", binary]);
      buildFolder.cleanup(); // the copy must not need anything from where it was built
    }
  }, 180_000);

  afterAll(() => {
    buildFolder?.cleanup();
    runFolder?.cleanup();
  });

  test("builds", () => {
    if (!binary) console.error(buildLog);
    expect(binary).not.toBe("");
  });

  test("--version and --help from another folder", () => {
    expect(binary).not.toBe("");
    const version = runProgram([binary, "--version"], { cwd: runFolder.path });
    expect(version.code).toBe(0);
    expect(version.stdout.trim()).toBe(packageVersion);
    const help = runProgram([binary, "index", "build", "--help"], { cwd: runFolder.path });
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("Usage: ctxr index build");
  }, 30_000);

  test("index build and simulate on a small workload", () => {
    expect(binary).not.toBe("");
    const lines = ["[1, 2, 3]", '{"id": "b", "blocks": [4, 2, 1]}', "", '["x", 1, 2]', "[3, 5]"];
    writeFileSync(join(runFolder.path, "contexts.jsonl"), lines.join("\n") + "\n");
    const build = runProgram([binary, "index", "build", "--input", "contexts.jsonl", "--output", "schedule.jsonl"], {
      cwd: runFolder.path,
    });
    expect(build.stderr).toBe("");
    expect(build.code).toBe(0);
    const summary = lastJsonLine(build.stdout);
    expect(summary.contexts).toBe(4);
    const output = readFileSync(join(runFolder.path, "schedule.jsonl"), "utf8").trimEnd().split("\n");
    expect(output.length).toBe(4);
    const simulate = runProgram([binary, "simulate", "--input", "schedule.jsonl"], { cwd: runFolder.path });
    expect(simulate.code).toBe(0);
    expect(lastJsonLine(simulate.stdout).hit_ratio).toBe(summary.hit_ratio as number);
    const bad = runProgram([binary, "index", "build", "--input", "contexts.jsonl", "--output", "x.jsonl", "--alpha", "no"], {
      cwd: runFolder.path,
    });
    expect(bad.code).toBe(2);
  }, 30_000);

  test("serve --model: the ZeroMQ sockets (no native addon) and xgrammar's WebAssembly work inside the binary", async () => {
    expect(binary).not.toBe("");
    const model = tinyModelFolder({ layers: 1 }, "tiny-binary");
    const server = Bun.spawn([binary, "serve", "--in-memory", "--port", "0", "--model", model.path, "--kv-blocks", "32", "--threads", "1", "--kv-events-publish", "tcp://127.0.0.1:0"], {
      cwd: runFolder.path,
      env: { ...process.env, CTXR_RUNNER: buildRunner() },
      stdout: "pipe",
      stderr: "ignore",
    });
    let peer: ZmqPeer | null = null;
    try {
      let out = "";
      for await (const chunk of server.stdout) {
        out += new TextDecoder().decode(chunk);
        if (out.includes("listening on")) break;
      }
      const events = /publishing KV events on (tcp:\/\/\S+)/.exec(out)?.[1];
      const url = /listening on (http:\/\/\S+)/.exec(out)?.[1];
      expect(events).toBeDefined();
      peer = await ZmqPeer.subscribe(events!);
      for (let i = 0; i < 100 && !(await (await fetch(`${url}/metrics`)).text()).includes("ctxr_kv_events_subscribers 1\n"); i++) await Bun.sleep(50);
      const answer = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "z".repeat(40), max_tokens: 1, temperature: 0 }) });
      expect(answer.status).toBe(200);
      const message = await peer.next("message");
      expect(Array.from(message!.frames![1]!)).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
      expect((decode(message!.frames![2]!) as { events: { type: string }[] }).events[0]!.type).toBe("BlockStored");
      // Structured outputs: xgrammar's WebAssembly loads and works inside the binary.
      const constrained = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: "Pick:", max_tokens: 10, temperature: 1, seed: 1, guided_choice: ["red", "green"] }),
      });
      expect(["red", "green"]).toContain(((await constrained.json()) as { choices: { text: string }[] }).choices[0]!.text);
    } finally {
      await peer?.close();
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
      model.cleanup();
    }
  }, 60_000);

  test("serve: the status page's script, minified inside the binary, still runs on its own and shows /v1/stats", async () => {
    expect(binary).not.toBe("");
    const server = Bun.spawn([binary, "serve", "--in-memory", "--port", "0"], { cwd: runFolder.path, stdout: "pipe", stderr: "ignore" });
    try {
      let out = "";
      for await (const chunk of server.stdout) {
        out += new TextDecoder().decode(chunk);
        if (out.includes("listening on")) break;
      }
      const url = /listening on (http:\/\/\S+)/.exec(out)![1]!;
      await fetch(`${url}/v1/reorder`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ contexts: [[1, 2, 3], [1, 2, 4]] }) });
      const page = await (await fetch(`${url}/`)).text();
      const script = /<script>\n([\s\S]*)\n<\/script>/.exec(page)![1]!;
      // The few DOM pieces the script touches, over the real server's JSON.
      const elements = new Map<string, { innerHTML: string; textContent: string; dataset: Record<string, string>; attributes: Record<string, string>; setAttribute(name: string, value: string): void }>();
      const element = () => ({ innerHTML: "", textContent: "", dataset: {} as Record<string, string>, attributes: {} as Record<string, string>, setAttribute(name: string, value: string) { this.attributes[name] = value; } });
      const body = element();
      const document = { body, getElementById: (id: string) => elements.get(id) ?? elements.set(id, element()).get(id)! };
      new Function("window", script)({ document, fetch: (path: string, init: RequestInit) => fetch(url + path, init), setTimeout: () => 0 });
      for (let i = 0; i < 100 && body.dataset.rendered === undefined; i++) await Bun.sleep(20);
      expect(body.dataset.rendered).toBe("1");
      const stats = (await (await fetch(`${url}/v1/stats`)).json()) as { prefix_hit_tokens: number; prompt_tokens: number };
      expect(stats.prefix_hit_tokens).toBeGreaterThan(0);
      expect(elements.get("figure-cached_tokens")!.attributes["data-value"]).toBe(String(stats.prefix_hit_tokens));
      expect(elements.get("figure-computed_tokens")!.attributes["data-value"]).toBe(String(stats.prompt_tokens - stats.prefix_hit_tokens));
      expect(elements.get("chart-tokens")!.innerHTML).toStartWith("<svg");
    } finally {
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
    }
  }, 60_000);

  test("serve --model: long prompts are tokenized on the tokenizer thread inside the binary (its worker entry is embedded)", async () => {
    expect(binary).not.toBe("");
    const model = tinyModelFolder({ layers: 1 }, "tiny-binary-tokenizer");
    const server = Bun.spawn([binary, "serve", "--in-memory", "--port", "0", "--model", model.path, "--kv-blocks", "32", "--threads", "1"], {
      cwd: runFolder.path,
      env: { ...process.env, CTXR_RUNNER: buildRunner() },
      stdout: "pipe",
      stderr: "pipe",
    });
    try {
      let out = "";
      for await (const chunk of server.stdout) {
        out += new TextDecoder().decode(chunk);
        if (out.includes("listening on")) break;
      }
      const url = /listening on (http:\/\/\S+)/.exec(out)?.[1];
      // Past the 4 KB kept inline; the tiny model's tokenizer is one token a byte, after BOS.
      const prompt = "tokens ".repeat(3000);
      const answer = await fetch(`${url}/tokenize`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt }) });
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as { count: number }).count).toBe(prompt.length + 1);
      // Tokenized there too, then refused as longer than the context.
      const chat = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ messages: [{ role: "user", content: prompt }], max_tokens: 1 }) });
      expect(chat.status).toBe(400);
      expect(((await chat.json()) as { error: { message: string } }).error.message).toMatch(/the prompt has 210\d\d tokens/);
    } finally {
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
      model.cleanup();
    }
    // A thread that cannot start falls back to tokenizing inline, saying so (a worker entry missing from the build): it must not have.
    expect(await new Response(server.stderr).text()).not.toContain("tokenizer thread");
  }, 60_000);

  test("serve --upstream --kv-events: the subscriber's ZeroMQ sockets (no native addon) follow an engine's events inside the binary", async () => {
    expect(binary).not.toBe("");
    const engine = await FakeEngine.start({ blockSize: 4, kvEvents: { layout: "array", hashes: "int" } });
    const server = Bun.spawn([binary, "serve", "--in-memory", "--port", "0", "--upstream", engine.url, "--kv-events", engine.kvEventsFlag], { cwd: runFolder.path, stdout: "pipe", stderr: "ignore" });
    try {
      let out = "";
      for await (const chunk of server.stdout) {
        out += new TextDecoder().decode(chunk);
        if (out.includes("listening on")) break;
      }
      expect(out).toContain(`following the KV events of ${engine.url} from ${engine.kvEventsEndpoint}`);
      const url = /listening on (http:\/\/\S+)/.exec(out)![1]!;
      const answer = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "z ".repeat(40), max_tokens: 1 }) });
      expect(answer.status).toBe(200);
      const followed = async () => ((await (await fetch(`${url}/v1/stats`)).json()) as { upstreams: { kv_events: { blocks: number; subscriber: { batches: number; layout: string } } }[] }).upstreams[0]!.kv_events;
      for (let i = 0; i < 200 && (await followed()).subscriber.batches === 0; i++) await Bun.sleep(50);
      const stats = await followed();
      expect(stats.subscriber).toMatchObject({ batches: 1, layout: "array" });
      expect(stats.blocks).toBe(engine.blocks.size);
      expect(stats.blocks).toBeGreaterThan(0);
    } finally {
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
      await engine.close();
    }
  }, 60_000);
});
