/**
 * `ctxr serve --upstream` with --engine auto (the default), as a user runs it: a spawned server
 * in front of loopback fakes of vLLM's, SGLang's and llama.cpp's own endpoints, a plain
 * OpenAI-compatible fake, and a real `ctxr serve --model`; GET /ready follows the upstreams.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { spawnServer, type SpawnedServer } from "../server/serverKit.ts";
import { llamacppEndpoints, sglangEndpoints, vllmEndpoints } from "./fakeEngineEndpoints.ts";
import { startFakeUpstream, type FakeUpstream } from "./fakeUpstream.ts";
import { docs, waitFor } from "./proxyKit.ts";
import { sleep } from "../../src/runtime/sleep.ts";

setDefaultTimeout(120_000);

const chat = (name: string) => ({ model: "fake-model", messages: [{ role: "user", content: `Q ${name}?` }], documents: docs(`${name}-a`, `${name}-b`) });

/** stderr is read apart from stdout: a line logged before "listening" may arrive after it. */
async function expectLogged(server: SpawnedServer, text: string): Promise<void> {
  await waitFor(() => server.stderr().includes(text), 10_000).catch(() => {});
  expect(server.stderr()).toContain(text);
}

async function stopped(server: SpawnedServer): Promise<void> {
  server.kill("SIGINT");
  expect(await server.exited).toBe(0);
}

describe("--engine auto", () => {
  const fakes: Record<"vllm" | "sglang" | "llamacpp" | "plain", FakeUpstream> = {} as never;
  beforeAll(async () => {
    for (const name of ["vllm", "sglang", "llamacpp", "plain"] as const) fakes[name] = await startFakeUpstream();
    fakes.vllm.custom(vllmEndpoints("0.9.1"));
    fakes.sglang.custom(sglangEndpoints("0.4.9"));
    fakes.llamacpp.custom(llamacppEndpoints("b8681"));
  });
  afterAll(async () => {
    for (const fake of Object.values(fakes)) await fake.stop();
  });

  test("detects each engine from its own endpoints, logs it plainly, and sets each one's request-id field", async () => {
    const server = await spawnServer(["--in-memory", "--upstream", fakes.vllm.url, "--upstream", fakes.sglang.url, "--upstream", fakes.llamacpp.url, "--upstream", fakes.plain.url, "--routing", "round-robin"]);
    try {
      expect(server.startLines[0]).toEndWith("(engine: detected for each upstream)");
      await expectLogged(server, `ctxr serve: upstream ${fakes.vllm.url}: vLLM 0.9.1 detected; request ids sent as "request_id"; KV-event cache sync off (no --kv-events for it)\n`);
      await expectLogged(server, `ctxr serve: upstream ${fakes.sglang.url}: SGLang 0.4.9 detected; request ids sent as "rid"; KV-event cache sync off (no --kv-events for it)\n`);
      await expectLogged(server, `ctxr serve: upstream ${fakes.llamacpp.url}: llama.cpp b8681 detected; no request-id field; KV-event cache sync off (no --kv-events for it)\n`);
      await expectLogged(server, `ctxr serve: upstream ${fakes.plain.url}: no vLLM, SGLang or llama.cpp endpoints found; treated as an OpenAI-compatible API: no request-id field; KV-event cache sync off (no --kv-events for it)\n`);

      // Round-robin: one request to each upstream.
      for (const name of ["r1", "r2", "r3", "r4"]) expect((await server.post("/v1/chat/completions", chat(name))).status).toBe(200);
      const forwarded = (fake: FakeUpstream) => fake.requests.filter((request) => request.method === "POST");
      for (const fake of Object.values(fakes)) expect(forwarded(fake).length).toBe(1);
      const vllm = forwarded(fakes.vllm)[0]!;
      expect(typeof vllm.json.request_id).toBe("string");
      expect(vllm.headers["x-request-id"]).toBe(vllm.json.request_id);
      const sglang = forwarded(fakes.sglang)[0]!;
      expect(typeof sglang.json.rid).toBe("string");
      expect(sglang.headers["x-request-id"]).toBeUndefined();
      for (const fake of [fakes.llamacpp, fakes.plain]) {
        const request = forwarded(fake)[0]!;
        expect(Object.keys(request.json)).toEqual(["model", "messages"]);
        expect(request.headers["x-request-id"]).toBeUndefined();
      }

      const ready = await server.get("/ready");
      expect(ready.status).toBe(200);
      expect(ready.body.status).toBe("ready");
      expect(ready.body.upstreams.map((u: { engine: string; detected: string | null }) => [u.engine, u.detected])).toEqual([
        ["vllm", "vLLM 0.9.1"],
        ["sglang", "SGLang 0.4.9"],
        ["llamacpp", "llama.cpp b8681"],
        ["openai", "an OpenAI-compatible API"],
      ]);
    } finally {
      await stopped(server);
    }
  });

  test("with --kv-events for it, the detection line says KV-event cache sync is on", async () => {
    const server = await spawnServer(["--in-memory", "--upstream", fakes.vllm.url, "--upstream", fakes.plain.url, "--kv-events", "tcp://127.0.0.1:9", "--kv-events", "none"]);
    try {
      await expectLogged(server, `ctxr serve: upstream ${fakes.vllm.url}: vLLM 0.9.1 detected; request ids sent as "request_id"; KV-event cache sync on\n`);
      await expectLogged(server, `ctxr serve: upstream ${fakes.plain.url}: no vLLM, SGLang or llama.cpp endpoints found; treated as an OpenAI-compatible API: no request-id field; KV-event cache sync off (no --kv-events for it)\n`);
      expect((await server.get("/ready")).status).toBe(200);
    } finally {
      await stopped(server);
    }
  });

  test("an explicit --engine is kept for every upstream and nothing is detected", async () => {
    const server = await spawnServer(["--in-memory", "--upstream", fakes.vllm.url, "--engine", "sglang"]);
    try {
      await sleep(300);
      expect(server.stderr()).not.toContain("detected");
      expect((await server.post("/v1/chat/completions", chat("explicit"))).status).toBe(200);
      expect(Object.keys(fakes.vllm.last().json)).toEqual(["model", "messages", "rid"]);
    } finally {
      await stopped(server);
    }
  });
});

describe("/ready and detection when an upstream goes and comes back", () => {
  let fake: FakeUpstream;
  beforeAll(async () => {
    fake = await startFakeUpstream();
  });
  afterAll(async () => fake.stop());

  test("503 with the reason while no upstream serves, 200 once one does; an engine that comes back is detected again", async () => {
    fake.fail(503, JSON.stringify({ error: "loading" }));
    const server = await spawnServer(["--in-memory", "--upstream", fake.url, "--probe-interval", "0.2"]);
    try {
      await expectLogged(server, `ctxr serve: upstream ${fake.url}: GET /v1/models answered 503; its engine is detected when it answers; requests go to the other upstreams meanwhile\n`);
      const down = await server.get("/ready");
      expect(down.status).toBe(503);
      expect(down.body).toMatchObject({ status: "not_ready", reason: `no upstream can serve (${fake.url}: GET /v1/models answered 503)` });
      expect(down.body.upstreams[0]).toMatchObject({ url: fake.url, serving: false, detected: null });
      // Liveness stays what it is: ctxr itself works.
      expect((await server.get("/healthz")).status).toBe(200);
      expect((await server.get("/health")).status).toBe(200);

      // It comes back as vLLM.
      fake.custom(vllmEndpoints("0.10.0"));
      await waitFor(() => server.stderr().includes("vLLM 0.10.0 detected"), 10_000);
      const up = await server.get("/ready");
      expect(up.status).toBe(200);
      expect(up.body.upstreams[0]).toMatchObject({ serving: true, engine: "vllm", detected: "vLLM 0.10.0" });
      expect((await server.post("/v1/chat/completions", chat("back"))).status).toBe(200);
      expect(typeof fake.requests.filter((r) => r.method === "POST").at(-1)!.json.request_id).toBe("string");

      // Gone again (connection refused is the same as an error answer), then back as llama.cpp.
      fake.fail(502, "bad gateway");
      await waitFor(() => server.stderr().includes("GET /v1/models answered 502"), 10_000);
      expect((await server.get("/ready")).status).toBe(503);
      fake.custom(llamacppEndpoints("b9000"));
      await waitFor(() => server.stderr().includes("llama.cpp b9000 detected"), 10_000);
      expect((await server.get("/ready")).body.upstreams[0].engine).toBe("llamacpp");
    } finally {
      await stopped(server);
    }
  });

  test("an upstream that does not exist: not reachable, named in /ready", async () => {
    const closed = await startFakeUpstream();
    const url = closed.url;
    await closed.stop();
    const server = await spawnServer(["--in-memory", "--upstream", url]);
    try {
      await expectLogged(server, `ctxr serve: upstream ${url}: not reachable (`);
      const ready = await server.get("/ready");
      expect(ready.status).toBe(503);
      expect(ready.body.reason).toStartWith(`no upstream can serve (${url}: not reachable (`);
    } finally {
      await stopped(server);
    }
  });
});

describe("a real ctxr serve --model upstream", () => {
  let runnerPath = "";
  let model: { path: string; cleanup(): void };
  beforeAll(() => {
    runnerPath = buildRunner();
    model = tinyModelFolder({}, "tiny-llama");
  });
  afterAll(() => model.cleanup());

  test("is detected as ctxr, and /ready of both answers 200; started in one folder with the default data dir, they do not lock each other out", async () => {
    const cwd = mkdtempSync(join(tmpdir(), "ctxr-one-folder-"));
    const engine = await spawnServer(["--model", model.path, "--kv-blocks", "32", "--threads", "1", "--served-model-name", "tiny"], { CTXR_RUNNER: runnerPath }, 60_000, cwd);
    try {
      const engineReady = await engine.get("/ready");
      expect(engineReady.status).toBe(200);
      expect(engineReady.body).toEqual({ status: "ready" });
      const proxy = await spawnServer(["--upstream", engine.url], {}, 20_000, cwd);
      try {
        await expectLogged(proxy, `ctxr serve: upstream ${engine.url}: ctxr detected; no request-id field; KV-event cache sync off (no --kv-events for it)\n`);
        const ready = await proxy.get("/ready");
        expect(ready.status).toBe(200);
        expect(ready.body.upstreams[0]).toMatchObject({ serving: true, engine: "openai", detected: "ctxr" });
        const answer = await proxy.post("/v1/completions", { model: "tiny", prompt: "hello", max_tokens: 2 });
        expect(answer.status).toBe(200);
        // A chat with documents: the proxy records its contexts (and so creates ./ctxr-data); the model server never wrote there.
        const documents = await proxy.post("/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "Q?" }], documents: docs("one", "two"), max_tokens: 2 });
        expect(documents.status).toBe(200);
        expect((await proxy.get("/healthz")).status).toBe(200);
        expect((await engine.get("/healthz")).status).toBe(200);
        expect(JSON.parse(readFileSync(join(cwd, "ctxr-data", "journal.lock"), "utf8")).pid).toBe(proxy.process.pid);
      } finally {
        await stopped(proxy);
      }
    } finally {
      await stopped(engine);
      rmSync(cwd, { recursive: true, force: true });
    }
  });
});
