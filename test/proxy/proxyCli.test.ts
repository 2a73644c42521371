/** `ctxr serve --upstream` as a user runs it: a spawned `bun src/cli/main.ts serve` in front of the fake engine. */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { runCli } from "../helpers/cli.ts";
import { spawnServer } from "../server/serverKit.ts";
import { startFakeUpstream, type FakeUpstream } from "./fakeUpstream.ts";
import { docs, sseData, streamPost } from "./proxyKit.ts";
import { sleep } from "../../src/runtime/sleep.ts";

setDefaultTimeout(60_000);

const KEY = "sk-cli-upstream-key-5f3a9";
let upstream: FakeUpstream;
beforeAll(async () => {
  upstream = await startFakeUpstream({ chunkDelayMs: 30 });
});
afterAll(async () => {
  await upstream.stop();
});

describe("ctxr serve --upstream", () => {
  test("--help lists the proxy options", () => {
    const run = runCli(["serve", "--help"]);
    expect(run.code).toBe(0);
    for (const flag of ["--upstream URL", "--upstream-key", "--engine", "vllm", "sglang", "llamacpp", "--upstream-timeout", "--document-template", "CTXR_UPSTREAM_KEY"]) expect(run.stdout).toContain(flag);
  });

  test("bad proxy flags are usage errors (exit 2) that never echo credentials", () => {
    for (const args of [
      ["--upstream", "ftp://x"],
      ["--upstream", "not a url"],
      ["--upstream", "http://a", "--engine", "tgi"],
      ["--upstream-key", "k"],
      ["--engine", "vllm"],
      ["--upstream", "http://a", "--upstream-key", ""],
      ["--upstream", "http://a", "--upstream-timeout", "0"],
      ["--upstream", "http://a", "--document-template", ""],
      ["--upstream"],
      ["--upstream", "http://a", "--probe-interval", "0"],
      ["--probe-interval", "1"],
      ["--upstream", "http://a", "--log-level", "loud"],
    ]) {
      const run = runCli(["serve", "--in-memory", ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain("ctxr serve: ");
    }
    const secret = runCli(["serve", "--in-memory", "--upstream", "gopher://user:hunter2-pw@host"]);
    expect(secret.code).toBe(2);
    expect(secret.stderr).not.toContain("hunter2-pw");
  });

  test("proxies with the key from the environment, sets rid for sglang, streams, passes /v1/models through, never logs the key", async () => {
    const server = await spawnServer(["--in-memory", "--upstream", upstream.url, "--upstream", `${upstream.url}/v1`, "--engine", "sglang", "--upstream-timeout", "30"], { CTXR_UPSTREAM_KEY: KEY });
    try {
      expect(server.startLines).toEqual([
        `ctxr serve: proxying /v1/chat/completions, /v1/completions and every other request (the engine's /health, /metrics... at /engine/PATH) to ${upstream.url}, ${upstream.url}/v1 (engine: sglang)`,
        `ctxr serve: listening on ${server.url} (data: memory)`,
      ]);
      const d = docs("cli1", "cli2");
      const answer = await server.post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "Q?" }], documents: d, ctxr: { dedup: false } });
      expect(answer.status).toBe(200);
      const forwarded = upstream.last();
      expect(forwarded.path).toBe("/v1/chat/completions");
      expect(forwarded.headers.authorization).toBe(`Bearer ${KEY}`);
      expect(Object.keys(forwarded.json)).toEqual(["model", "messages", "rid"]);
      expect(answer.body.id).toBe(`chatcmpl-${forwarded.json.rid}`);
      expect(forwarded.json.messages[0].content).toContain('<document id="cli1">');

      const started = performance.now();
      const streamed = await streamPost(`${server.url}/v1/chat/completions`, { messages: [{ role: "user", content: "stream" }], stream: true, stream_options: { include_usage: true } });
      expect(streamed.status).toBe(200);
      expect(sseData(streamed.text).at(-1)).toBe("[DONE]");
      // Incremental: the first chunk well before the last (the upstream waits 30 ms between chunks).
      expect(streamed.chunks.length).toBeGreaterThan(5);
      expect(streamed.chunks[streamed.chunks.length - 1]!.at - streamed.chunks[0]!.at).toBeGreaterThan(150);
      expect(streamed.chunks[0]!.at - started).toBeLessThan(upstream.last().finishedAt! - started);

      const models = await server.get("/v1/models");
      expect(models.body.data[0].id).toBe("fake-model");
      const stats = (await server.get("/v1/stats")).body;
      expect(stats.upstreams.map((u: { url: string }) => u.url)).toEqual([upstream.url, `${upstream.url}/v1`]);
      expect(stats.upstreams.reduce((n: number, u: { requests: number }) => n + u.requests, 0)).toBe(3);
      expect(stats.upstreams.reduce((n: number, u: { documents: number }) => n + u.documents, 0)).toBe(2);
      expect(JSON.stringify(stats)).not.toContain(KEY);
    } finally {
      server.kill("SIGINT");
      expect(await server.exited).toBe(0);
    }
    expect(server.stderr()).not.toContain(KEY);
    expect(server.startLines.join("\n")).not.toContain(KEY);
  });

  test("short upstream secrets: a warning at startup that names them without showing them", async () => {
    const server = await spawnServer(["--in-memory", "--upstream", `http://svc-user:Pw9@127.0.0.1:${upstream.port}`, "--upstream-key", "k1"]);
    try {
      await sleep(50);
      const stderr = server.stderr();
      expect(stderr).toContain("ctxr serve: warning: the upstream key is 2 characters long");
      expect(stderr).toContain(`ctxr serve: warning: the user name in --upstream http://127.0.0.1:${upstream.port} is 8 characters long`);
      expect(stderr).toContain(`ctxr serve: warning: the password in --upstream http://127.0.0.1:${upstream.port} is 3 characters long`);
      for (const secret of ["k1", "svc-user", "Pw9"]) expect(stderr).not.toContain(secret);
    } finally {
      server.kill("SIGINT");
      expect(await server.exited).toBe(0);
    }
  });
});
