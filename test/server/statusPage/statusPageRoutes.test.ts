/** GET / and GET /v1/stats/history on a real server (port 0): the online API alone, and the proxy. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { sleep } from "../../../src/runtime/sleep.ts";
import { statusFigures } from "../../../src/server/statusPage/statusFigures.ts";
import { STATUS_PAGE_CSP } from "../../../src/server/statusPage/statusPageHtml.ts";
import { startTestServer, type TestServer } from "../serverKit.ts";
import { startFakeUpstream, type FakeUpstream } from "../../proxy/fakeUpstream.ts";
import { startProxy, type ProxyServer } from "../../proxy/proxyKit.ts";

const SAMPLE_EVERY_MS = 50;

async function historyAfter(server: TestServer, timeMs: number) {
  let body: any;
  for (let tries = 0; tries < 100; tries++) {
    body = (await server.get("/v1/stats/history")).body;
    if (body.samples.at(-1).time_ms > timeMs) return body;
    await sleep(SAMPLE_EVERY_MS);
  }
  throw new Error("no sample after the requests");
}

describe("the status page on the online API", () => {
  let api: TestServer;
  beforeAll(async () => {
    api = await startTestServer({ server: { statusSampleEveryMs: SAMPLE_EVERY_MS } });
  });
  afterAll(async () => api.close());

  test("GET / is one self-contained HTML page that may reach nothing but this server", async () => {
    const answer = await api.get("/");
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toStartWith("text/html");
    expect(answer.headers.get("content-security-policy")).toBe(STATUS_PAGE_CSP);
    expect(STATUS_PAGE_CSP).toContain("default-src 'none'");
    expect(STATUS_PAGE_CSP).toContain("connect-src 'self'");
    // Every src/href is inline data; the only absolute URL is the SVG namespace (a name, never fetched).
    const references = [...answer.text.matchAll(/\b(?:src|href)="([^"]*)"/g)].map((match) => match[1]);
    expect(references).toEqual(["data:,"]);
    expect(answer.text.match(/https?:\/\/[^"'\s<>`]+/g)?.every((url) => url === "http://www.w3.org/2000/svg")).toBe(true);
    expect(answer.text).toContain('fetch(path'); // the script polls the server's own JSON
    for (const id of ["figure-cached_tokens", "figure-ttft_reused_ms", "figure-queue_depth", "figure-kv_blocks_used", "chart-tokens", "chart-upstreams", "upstreams"]) expect(answer.text).toContain(`id="${id}"`);
  });

  test("HEAD / answers like GET; POST / is a 405 naming the methods", async () => {
    expect((await api.request("HEAD", "/")).status).toBe(200);
    const post = await api.post("/", {});
    expect(post.status).toBe(405);
    expect(post.body.error.message).toBe("method POST not allowed on /; use GET, HEAD");
  });

  test("/v1/stats/history: samples on the timer, the newest equal to /v1/stats through the binding", async () => {
    const started = Date.now();
    const reorder = await api.post("/v1/reorder", { contexts: [[1, 2, 3, 4], [1, 2, 3, 5]] });
    expect(reorder.status).toBe(200);
    const history = await historyAfter(api, Date.now());
    expect(history.every_ms).toBe(SAMPLE_EVERY_MS);
    expect(history.capacity).toBeGreaterThan(10);
    const times = history.samples.map((sample: any) => sample.time_ms);
    expect(times).toEqual([...times].sort((a: number, b: number) => a - b));
    expect(times[0]).toBeLessThanOrEqual(started);
    const stats = (await api.get("/v1/stats")).body;
    const newest = history.samples.at(-1).figures;
    expect(newest).toEqual(statusFigures(stats));
    expect(newest).toMatchObject({ mode: "index", cached_tokens: stats.prefix_hit_tokens, computed_tokens: stats.prompt_tokens - stats.prefix_hit_tokens });
    expect(newest.cached_tokens).toBeGreaterThan(0);
  });

  test("both routes are in the OpenAPI document", async () => {
    const doc = (await api.get("/openapi.json")).body;
    expect(doc.paths["/"].get.responses["200"].content["text/html"]).toBeDefined();
    expect(doc.components.schemas.StatsHistoryResponse).toBeDefined();
  });
});

describe("the status page on the proxy", () => {
  let upstream: FakeUpstream;
  let proxy: ProxyServer;
  beforeAll(async () => {
    upstream = await startFakeUpstream({ chunkDelayMs: 0 });
    proxy = await startProxy({ upstreams: [upstream.url] }, { statusSampleEveryMs: SAMPLE_EVERY_MS });
  });
  afterAll(async () => {
    await proxy.close();
    await upstream.stop();
  });

  test("GET / and /v1/stats/history are ctxr's own, not passed to the upstream", async () => {
    expect((await proxy.get("/")).text).toContain("<title>ctxr status</title>");
    expect((await proxy.get("/v1/stats/history")).status).toBe(200);
    expect(upstream.requests.map((request) => request.path)).not.toContain("/");
  });

  test("per-upstream figures follow /v1/stats", async () => {
    for (let i = 0; i < 2; i++) {
      const answer = await proxy.post("/v1/chat/completions", { model: "fake-model", messages: [{ role: "user", content: "the same question about the same long context, asked twice" }] });
      expect(answer.status).toBe(200);
    }
    const history = await historyAfter(proxy, Date.now());
    const stats = (await proxy.get("/v1/stats")).body;
    const newest = history.samples.at(-1).figures;
    expect(newest).toEqual(statusFigures(stats));
    expect(newest.mode).toBe("proxy");
    expect(newest.upstreams).toEqual([
      { url: stats.upstreams[0].url, healthy: true, requests: 2, in_flight: 0, cached_tokens: stats.upstreams[0].cached_tokens, prompt_tokens: stats.upstreams[0].prompt_tokens_forwarded },
    ]);
    expect(newest.cached_tokens).toBeGreaterThan(0);
  });
});
