/**
 * The proxy and the engine's own endpoints: paths outside /v1 (/tokenize,
 * /detokenize, /version, ...) pass through, ctxr's own (/health, /metrics)
 * stay ctxr's with the engine's under /engine/, and the engine request id is
 * set on streamed requests as on the others (in the body and, for vLLM, in
 * the X-Request-Id header it prefers).
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { parseUpstreamUrl, upstreamRequestUrl } from "../../src/proxy/upstreamTarget.ts";
import { startFakeUpstream, type FakeUpstream } from "./fakeUpstream.ts";
import { docs, settle, sseData, startProxy, streamPost, type ProxyServer } from "./proxyKit.ts";

let upstream: FakeUpstream;
let ctxr: ProxyServer;
beforeAll(async () => {
  upstream = await startFakeUpstream({ chunkDelayMs: 1 });
  ctxr = await startProxy({ upstreams: [upstream.url], engine: "vllm" });
});
afterAll(async () => {
  await ctxr.close();
  await upstream.stop();
});
afterEach(() => settle(ctxr, upstream));

const ID = /^ctxr-[0-9a-f]{32}$/;

describe("the engine request id", () => {
  test("a streamed chat request carries it in the body and in X-Request-Id (a gateway's replaced); the streamed id evicts the context", async () => {
    const answer = await streamPost(`${ctxr.url}/v1/chat/completions`, { messages: [{ role: "user", content: "Q" }], documents: docs("s1", "s2"), stream: true }, { "x-request-id": "gateway-7" });
    expect(answer.status).toBe(200);
    const seen = upstream.last();
    expect(seen.json.stream).toBe(true);
    expect(seen.json.request_id).toMatch(ID);
    expect(seen.headers["x-request-id"]).toBe(seen.json.request_id);
    const chunks = sseData(answer.text).filter((data) => data !== "[DONE]").map((data) => JSON.parse(data));
    expect(chunks.length).toBeGreaterThan(2);
    for (const chunk of chunks) expect(chunk.id).toBe(`chatcmpl-${seen.json.request_id}`);
    expect((await ctxr.get("/v1/stats")).body.contexts).toBe(1);
    expect((await ctxr.post("/v1/evict", { request_ids: [chunks[0].id] })).body).toEqual({ evicted: 1 });
  });

  test("streamed and non-streamed completions alike; without documents (no id recorded) the client's X-Request-Id goes as sent", async () => {
    const prompt = "Context:\n[1] Rome is in Italy.\n[2] Oslo is in Norway.\n\nQuestion: capitals?";
    for (const stream of [true, false]) {
      const answer = await streamPost(`${ctxr.url}/v1/completions`, { prompt, stream, max_tokens: 3 });
      expect(answer.status).toBe(200);
      const seen = upstream.last();
      expect({ stream, id: seen.json.request_id }).toEqual({ stream, id: expect.stringMatching(ID) });
      expect(seen.headers["x-request-id"]).toBe(seen.json.request_id);
    }
    await streamPost(`${ctxr.url}/v1/chat/completions`, { messages: [{ role: "user", content: "no documents" }], stream: true }, { "x-request-id": "gateway-8" });
    expect(upstream.last().json.request_id).toBeUndefined();
    expect(upstream.last().headers["x-request-id"]).toBe("gateway-8");
  });

  test("sglang gets rid in the body and no header", async () => {
    const own = await startFakeUpstream({ chunkDelayMs: 1 });
    const server = await startProxy({ upstreams: [own.url], engine: "sglang" });
    try {
      await streamPost(`${server.url}/v1/chat/completions`, { messages: [{ role: "user", content: "Q" }], documents: docs("g1", "g2"), stream: true });
      expect(own.last().json.rid).toMatch(ID);
      expect(own.last().headers["x-request-id"]).toBeUndefined();
    } finally {
      await server.close();
      await own.stop();
    }
  });
});

describe("engine paths outside /v1", () => {
  test("/tokenize, /detokenize, /version and any other path: method, path, query, body and status intact", async () => {
    upstream.custom((r) => {
      if (r.path === "/tokenize") return Response.json({ count: 2, max_model_len: 4096, tokens: [9, 8], token_strs: null });
      if (r.path === "/detokenize") return Response.json({ error: { message: "bad token" } }, { status: 400 });
      if (r.path === "/version") return Response.json({ version: "0.9.0" });
      if (r.method === "DELETE") return new Response(null, { status: 204 });
      return undefined;
    });
    const tokenize = '{"model":"m","prompt":"héllo", "add_special_tokens":false}';
    const answer = await ctxr.post("/tokenize?x=1", tokenize);
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ count: 2, max_model_len: 4096, tokens: [9, 8], token_strs: null });
    expect(upstream.last()).toMatchObject({ method: "POST", url: "/tokenize?x=1", text: tokenize });

    const detokenize = await ctxr.post("/detokenize", { tokens: [-1] });
    expect(detokenize.status).toBe(400);
    expect(detokenize.body.error.message).toBe("bad token");
    expect(upstream.last()).toMatchObject({ method: "POST", path: "/detokenize", json: { tokens: [-1] } });

    expect((await ctxr.get("/version")).body).toEqual({ version: "0.9.0" });
    expect((await ctxr.request("DELETE", "/slots/0?id_slot=0")).status).toBe(204);
    expect(upstream.last()).toMatchObject({ method: "DELETE", url: "/slots/0?id_slot=0" });
    // What the engine does not have: its 404, relayed.
    const missing = await ctxr.request("PUT", "/no/such/path", { body: new Uint8Array([1, 2, 255]) });
    expect(missing.status).toBe(404);
    expect(missing.body.error.message).toBe("no route PUT /no/such/path");
    expect([...upstream.last().bytes]).toEqual([1, 2, 255]);
  });

  test("ctxr's /health and /metrics stay ctxr's; the engine's are /engine/health and /engine/metrics; the path is passed as sent", async () => {
    upstream.custom((r) => {
      if (r.path === "/health") return new Response(null, { status: 503 });
      if (r.path === "/metrics") return new Response("vllm:num_requests_running 3\n", { headers: { "content-type": "text/plain" } });
      return undefined;
    });
    const before = upstream.requests.length;
    const own = await ctxr.get("/health");
    expect({ status: own.status, text: own.text }).toEqual({ status: 200, text: "" });
    expect((await ctxr.get("/metrics")).text).toContain("ctxr_http_requests_total");
    expect((await ctxr.request("POST", "/metrics")).status).toBe(405);
    expect((await ctxr.request("DELETE", "/health")).status).toBe(405);
    expect(upstream.requests.length).toBe(before);

    expect((await ctxr.get("/engine/health")).status).toBe(503);
    expect(upstream.last()).toMatchObject({ method: "GET", url: "/health" });
    const engineMetrics = await ctxr.get("/engine/metrics?name=x");
    expect(engineMetrics.text).toBe("vllm:num_requests_running 3\n");
    expect(upstream.last().url).toBe("/metrics?name=x");
    await ctxr.get("/engine/v1/stats");
    expect(upstream.last().path).toBe("/v1/stats");
    await ctxr.get("/engine/files/a%2Fb%20c%41");
    expect(upstream.last().url).toBe("/files/a%2Fb%20c%41");
    await ctxr.get("/engine");
    expect(upstream.last().url).toBe("/");

    const metrics = (await ctxr.get("/metrics")).text;
    expect(metrics).toContain('ctxr_http_requests_total{route="/engine/* (passthrough)",method="GET",status="503"} 1');
    expect(metrics).toContain('ctxr_http_requests_total{route="/health",method="GET",status="200"}');
  });

  test("an upstream given as an API root (…/v1): /v1/* under it, other paths beside it", async () => {
    const root = parseUpstreamUrl("http://gw.local/api/v1?k=1");
    expect(upstreamRequestUrl(root, "/v1/models", "")).toBe("http://gw.local/api/v1/models?k=1");
    expect(upstreamRequestUrl(root, "/tokenize", "a=b")).toBe("http://gw.local/api/tokenize?k=1&a=b");
    const server = await startProxy({ upstreams: [`${upstream.url}/v1`] });
    try {
      await server.post("/tokenize", { prompt: "x" });
      expect(upstream.last().path).toBe("/tokenize");
      await server.get("/v1/models");
      expect(upstream.last().path).toBe("/v1/models");
    } finally {
      await server.close();
    }
  });

  test("with a ctxr API key, passed-through paths need it and /health does not", async () => {
    const server = await startProxy({ upstreams: [upstream.url] }, { apiKey: "ctxr-key" });
    try {
      const before = upstream.requests.length;
      expect((await server.post("/tokenize", { prompt: "x" })).status).toBe(401);
      expect((await server.get("/engine/health")).status).toBe(401);
      expect(upstream.requests.length).toBe(before);
      expect((await server.get("/health")).status).toBe(200);
      await server.post("/tokenize", { prompt: "x" }, { authorization: "Bearer ctxr-key" });
      expect(upstream.last().path).toBe("/tokenize");
      expect(upstream.last().headers.authorization).toBeUndefined();
    } finally {
      await server.close();
    }
  });

  test("/openapi.json documents the passthrough paths", async () => {
    const document = (await ctxr.get("/openapi.json")).body;
    expect(Object.keys(document.paths["/{path}"]).sort()).toEqual(["delete", "get", "patch", "post", "put"]);
    expect(document.paths["/engine/{path}"].get).toBeDefined();
    expect(document.paths["/health"].get).toBeDefined();
  });
});
