/**
 * `ctxr serve --upstream` end to end: a real ctxr server (Bun.serve, real
 * fetch) in front of a real fake engine (fakeUpstream.ts): what is forwarded,
 * what comes back and how fast, what is counted, what never leaks.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { startFakeUpstream, type FakeUpstream } from "./fakeUpstream.ts";
import { docs, PRIORITY, rendered, settle, sseData, startProxy, streamPost, waitFor, type ProxyServer } from "./proxyKit.ts";
import { sleep } from "../../src/runtime/sleep.ts";
import { gzipSync } from "node:zlib";
import { runtimeName } from "../../src/runtime/runtimeName.ts";

const KEY = "sk-upstream-0123456789-secret";

let upstream: FakeUpstream;
let ctxr: ProxyServer;
beforeAll(async () => {
  upstream = await startFakeUpstream();
  ctxr = await startProxy({ upstreams: [upstream.url], upstreamKey: KEY, engine: "vllm", timeoutMs: 400, backoffMs: 100, maxBackoffMs: 400 });
});
afterAll(async () => {
  await ctxr.close();
  await upstream.stop();
});
afterEach(async () => {
  await settle(ctxr, upstream);
  // Nothing ctxr logged or answered may contain the upstream key.
  for (const line of ctxr.logs) expect(line).not.toContain(KEY);
});

describe("POST /v1/chat/completions", () => {
  test("forwards the exact body: documents rendered and removed, ctxr removed, request_id set; answers with the upstream's answer", async () => {
    const d = docs("alpha", "beta", "gamma");
    const answer = await ctxr.post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "Which?" }], documents: d, temperature: 0, ctxr: { conversation_id: "c1" } });
    expect(answer.status).toBe(200);
    const requestId = /^chatcmpl-(ctxr-[0-9a-f]{32})$/.exec(answer.body.id)![1]!;
    const content = `<documents>\n${d.map(rendered).join("\n")}\n</documents>\n${PRIORITY("[Doc 1] > [Doc 2] > [Doc 3]")}\n\nWhich?`;
    expect(upstream.last().text).toBe(JSON.stringify({ model: "m", messages: [{ role: "user", content }], temperature: 0, request_id: requestId }));
    expect(upstream.last().path).toBe("/v1/chat/completions");
    expect(answer.body.choices[0].message.content).toBe("The documents say the answer is forty-two.");
    expect(answer.headers.get("content-type")).toContain("application/json");
    // The request id is the context's id in the live index.
    expect((await ctxr.get("/v1/stats")).body.contexts).toBe(1);
    expect((await ctxr.post("/v1/evict", { request_ids: [answer.body.id] })).body).toEqual({ evicted: 1 });
  });

  test("a later request with overlapping documents gets the cached ones first, with the priority annotation", async () => {
    await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content: "Q1" }], documents: docs("a", "b", "c", "d") });
    await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content: "Q2" }], documents: docs("x", "b", "a", "y") });
    const content: string = upstream.last().json.messages[0].content;
    const order = [...content.matchAll(/<document id="(\w+)">/g)].map((m) => m[1]);
    expect(order).toEqual(["a", "b", "x", "y"]);
    // Original relevance order x > b > a > y, as labels of the forwarded positions.
    expect(content).toContain(PRIORITY("[Doc 3] > [Doc 2] > [Doc 1] > [Doc 4]"));
    const stats = (await ctxr.get("/v1/stats")).body.upstreams[0];
    expect(stats.estimated_cached_tokens).toBeGreaterThan(0);
  });

  test("a second turn: history byte-identical to what was forwarded, repeated documents deduplicated, counted per upstream", async () => {
    const turn1 = [{ role: "user", content: "First question?" }];
    const before = await upstreamStats();
    await ctxr.post("/v1/chat/completions", { messages: turn1, documents: docs("p", "q"), ctxr: { conversation_id: "conv" } });
    const forwarded1 = upstream.last().json.messages[0].content as string;
    const turn2 = [...turn1, { role: "assistant", content: "An answer." }, { role: "user", content: "Second question?" }];
    await ctxr.post("/v1/chat/completions", { messages: turn2, documents: docs("q", "r"), ctxr: { conversation_id: "conv" } });
    const messages = upstream.last().json.messages;
    expect(messages[0].content).toBe(forwarded1);
    expect(messages[2].content).toContain("Please refer to [Doc 2] in the previous conversation.");
    expect(messages[2].content).not.toContain(docs("q")[0]!.text);
    // The upstream saw the whole first prompt again: it reports it cached.
    const stats = delta(before, await upstreamStats());
    expect(stats).toMatchObject({ requests: 2, errors: 0, documents: 4, documents_deduplicated: 1, cached_tokens_reports: 2 });
    // The second prompt starts with the whole first one (the answer text aside).
    expect(stats.cached_tokens).toBeGreaterThanOrEqual(forwarded1.split(/\s+/).length);
    expect(stats.prompt_tokens_received).toBeGreaterThan(0);
    expect(stats.prompt_tokens_forwarded).toBeGreaterThan(0);
  });

  test("a body with no documents and no ctxr field is forwarded byte for byte", async () => {
    const raw = '{"model":  "m", "messages": [{"role": "user", "content": "plain \\u00e9"}],\n "top_p": 1.50, "x": {"nested": [1, 2.0]}}';
    const answer = await ctxr.post("/v1/chat/completions", raw);
    expect(answer.status).toBe(200);
    expect(upstream.last().text).toBe(raw);
    expect((await ctxr.get("/v1/stats")).body.contexts).toBe(0);
  });

  test("streaming: SSE chunks are relayed as they arrive, byte-identical, and the usage chunk's cached tokens are counted", async () => {
    const body = { messages: [{ role: "user", content: "Stream it." }], documents: docs("s1", "s2"), stream: true, stream_options: { include_usage: true } };
    await ctxr.post("/v1/chat/completions", { ...body, stream: false });
    const before = (await ctxr.get("/v1/stats")).body.upstreams[0].cached_tokens;
    const started = performance.now();
    const answer = await streamPost(`${ctxr.url}/v1/chat/completions`, { ...body, ctxr: { conversation_id: "other" } });
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toBe("text/event-stream");
    const record = upstream.last();
    // The first chunk arrived long before the upstream finished (it sleeps 20 ms between chunks).
    expect(record.finishedAt).not.toBeNull();
    expect(answer.chunks[0]!.at).toBeLessThan(record.finishedAt! - 100);
    expect(answer.chunks[0]!.at - started).toBeLessThan(record.finishedAt! - started);
    expect(answer.chunks.length).toBeGreaterThanOrEqual(8);
    const data = sseData(answer.text);
    expect(data[data.length - 1]).toBe("[DONE]");
    const usage = JSON.parse(data[data.length - 2]!).usage;
    expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    const words = data.slice(0, -2).map((d) => JSON.parse(d).choices[0].delta.content ?? "").join("");
    expect(words).toBe("The documents say the answer is forty-two.");
    await waitFor(() => ctxr.server.inFlight === 0);
    const stats = (await ctxr.get("/v1/stats")).body.upstreams[0];
    expect(stats.cached_tokens - before).toBe(usage.prompt_tokens_details.cached_tokens);
    expect(stats.in_flight).toBe(0);
  });

  test("a client that goes away mid-stream releases the upstream request", async () => {
    const controller = new AbortController();
    const response = await fetch(`${ctxr.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "long" }], stream: true }),
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    await reader.read();
    expect((await upstreamStats()).in_flight).toBe(1);
    controller.abort();
    const record = upstream.last();
    for (let i = 0; (await upstreamStats()).in_flight !== 0; i++) {
      expect(i).toBeLessThan(500);
      await sleep(5);
    }
    // The upstream's stream was cancelled before its end.
    await sleep(100);
    expect(record.finishedAt).toBeNull();
  });

  test("upstream errors come back with the upstream's status and body; the context is not kept", async () => {
    const errorBody = '{"error": {"message": "model \\"m\\" is overloaded", "type": "overloaded", "code": 429}}';
    const before = await upstreamStats();
    upstream.fail(429, errorBody, { "content-type": "application/json", "retry-after": "3" });
    const answer = await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content: "Q" }], documents: docs("e1", "e2") });
    expect(answer.status).toBe(429);
    expect(answer.text).toBe(errorBody);
    expect(answer.headers.get("retry-after")).toBe("3");
    const stats = (await ctxr.get("/v1/stats")).body;
    expect(stats.contexts).toBe(0);
    expect(stats.upstreams[0].healthy).toBe(true);
    expect(delta(before, stats.upstreams[0])).toMatchObject({ requests: 1, errors: 1, documents: 0, prompt_tokens_received: 0 });
    upstream.fail(500, "plain text failure", { "content-type": "text/plain" });
    const streamed = await streamPost(`${ctxr.url}/v1/chat/completions`, { messages: [{ role: "user", content: "Q" }], stream: true });
    expect(streamed.status).toBe(500);
    expect(streamed.text).toBe("plain text failure");
  });

  test("an upstream that does not answer in time: 504, taken out of rotation (502 meanwhile), back after its backoff", async () => {
    upstream.hang();
    const answer = await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content: "Q" }], documents: docs("h1") });
    expect(answer.status).toBe(504);
    expect(answer.body.error.message).toContain("sent no answer within 400 ms");
    let stats = (await ctxr.get("/v1/stats")).body;
    expect(stats.contexts).toBe(0);
    expect(stats.upstreams[0]).toMatchObject({ healthy: false, consecutive_failures: 1, last_error: "no answer within 400 ms" });
    expect(stats.upstreams[0].retry_in_ms).toBeLessThanOrEqual(100);
    upstream.recover();
    const meanwhile = await ctxr.get("/v1/models");
    if (meanwhile.status === 502) expect(meanwhile.body.error.message).toContain("no upstream available");
    await sleep(120);
    expect((await ctxr.get("/v1/models")).status).toBe(200);
    stats = (await ctxr.get("/v1/stats")).body;
    expect(stats.upstreams[0]).toMatchObject({ healthy: true, consecutive_failures: 0, retry_in_ms: null });
    expect(ctxr.logs.some((line) => line.includes("timed out"))).toBe(true);
    expect(ctxr.logs.some((line) => line.includes("back in rotation"))).toBe(true);
  });

  test("malformed input is a 400 naming the field, and nothing is forwarded", async () => {
    const before = upstream.requests.length;
    const cases: [unknown, string][] = [
      ["{not json", "body"],
      ["[1, 2]", "body"],
      [{ messages: [], ctxr: { reorder: "yes" } }, "ctxr.reorder"],
      [{ messages: [], ctxr: { frobnicate: true } }, "ctxr.frobnicate"],
      [{ messages: [], documents: [{ id: "x" }] }, "documents[0].text"],
      [{ messages: [], documents: "text" }, "documents"],
    ];
    for (const [body, field] of cases) {
      const answer = await ctxr.post("/v1/chat/completions", body);
      expect({ body, status: answer.status, field: answer.body?.error?.field }).toEqual({ body, status: 400, field });
    }
    expect(upstream.requests.length).toBe(before);
  });
});

async function upstreamStats(): Promise<Record<string, number>> {
  return (await ctxr.get("/v1/stats")).body.upstreams[0];
}

/** Counter increases between two stats of an upstream. */
function delta(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, value] of Object.entries(after)) if (typeof value === "number" && typeof before[name] === "number") out[name] = value - before[name]!;
  return out;
}

describe("POST /v1/completions", () => {
  test("numbered documents in the prompt are reordered against the index; request_id set; stream relayed", async () => {
    await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content: "warm" }], documents: [{ text: "Bern is in Switzerland." }, { text: "Oslo is in Norway." }] });
    const prompt = "Context:\n[1] Rome is in Italy.\n[2] Oslo is in Norway.\n[3] Bern is in Switzerland.\n\nQuestion: capitals?";
    const answer = await streamPost(`${ctxr.url}/v1/completions`, { model: "m", prompt, stream: true, max_tokens: 5 });
    expect(answer.status).toBe(200);
    const forwarded = upstream.last().json;
    expect(upstream.last().path).toBe("/v1/completions");
    expect(forwarded.request_id).toMatch(/^ctxr-/);
    expect(forwarded.max_tokens).toBe(5);
    expect(forwarded.prompt).toStartWith("Context:\n[1] Bern is in Switzerland.\n[2] Oslo is in Norway.\n[3] Rome is in Italy.");
    expect(sseData(answer.text).at(-1)).toBe("[DONE]");
  });
});

describe("passthrough", () => {
  test("GET /v1/models with a query: method, path, query and answer unchanged", async () => {
    const answer = await ctxr.get("/v1/models?limit=5&after=x");
    expect(answer.status).toBe(200);
    expect(answer.body.data[0].id).toBe("fake-model");
    expect(upstream.last()).toMatchObject({ method: "GET", url: "/v1/models?limit=5&after=x", text: "" });
  });

  test("other methods and paths: body bytes and headers as sent (minus hop-by-hop), answers as the upstream gave them", async () => {
    const body = new Uint8Array([0, 1, 2, 250, 255, 10, 13]);
    const answer = await ctxr.request("PUT", "/v1/files/abc?purpose=x", {
      body,
      headers: { "content-type": "application/octet-stream", "x-custom": "kept", "openai-organization": "org-1", connection: "keep-alive, x-hop", "x-hop": "dropped", te: "trailers" },
    });
    expect(answer.status).toBe(404);
    expect(answer.body.error.message).toBe("no route PUT /v1/files/abc");
    const seen = upstream.last();
    expect(seen.method).toBe("PUT");
    expect(seen.url).toBe("/v1/files/abc?purpose=x");
    expect([...seen.bytes]).toEqual([...body]);
    expect(seen.headers["x-custom"]).toBe("kept");
    expect(seen.headers["openai-organization"]).toBe("org-1");
    expect(seen.headers["content-type"]).toBe("application/octet-stream");
    expect(seen.headers["x-hop"]).toBeUndefined();
    expect(seen.headers.te).toBeUndefined();
    expect(seen.headers.authorization).toBe(`Bearer ${KEY}`);

    const embedding = '{"input": "hello", "model": "e"}';
    await ctxr.post("/v1/embeddings", embedding, { authorization: "Bearer client-key" });
    expect(upstream.last().text).toBe(embedding);
    expect(upstream.last().headers.authorization).toBe(`Bearer ${KEY}`);
  });

  test("ctxr's own routes are never forwarded: another method is a 405", async () => {
    const before = upstream.requests.length;
    for (const [method, path] of [["GET", "/v1/reorder"], ["DELETE", "/v1/evict"], ["POST", "/v1/stats"], ["GET", "/v1/reset"]] as const) {
      const answer = await ctxr.request(method, path);
      expect({ path, status: answer.status }).toEqual({ path, status: 405 });
    }
    expect(upstream.requests.length).toBe(before);
    expect((await ctxr.get("/v1/stats")).status).toBe(200);
  });

  // Bun's only: under Deno the upstream is asked for identity (src/runtime/httpClient.ts), and Deno's fetch here would decode the answer.
  test.skipIf(runtimeName !== "bun")("without secrets to redact, a compressed answer is relayed compressed, as the upstream encoded it", async () => {
    const own = await startFakeUpstream();
    const server = await startProxy({ upstreams: [own.url] });
    try {
      const payload = JSON.stringify({ object: "list", data: Array.from({ length: 50 }, (_, i) => ({ id: `m${i}` })) });
      const gzipped = gzipSync(new TextEncoder().encode(payload));
      own.custom(() => new Response(gzipped, { headers: { "content-encoding": "gzip", "content-type": "application/json" } }));
      const response = await fetch(`${server.url}/v1/models`, { headers: { "accept-encoding": "gzip" }, decompress: false } as RequestInit);
      expect(response.status).toBe(200);
      expect(response.headers.get("content-encoding")).toBe("gzip");
      expect(new Uint8Array(await response.arrayBuffer())).toEqual(gzipped);
      expect(own.last().headers["accept-encoding"]).toBe("gzip");
    } finally {
      await server.close();
      await own.stop();
    }
  });

  test("with an upstream key, the upstream is asked for identity, and a compressed answer anyway is relayed decoded", async () => {
    const payload = JSON.stringify({ object: "list", data: Array.from({ length: 50 }, (_, i) => ({ id: `m${i}` })) });
    upstream.custom(() => new Response(gzipSync(new TextEncoder().encode(payload)), { headers: { "content-encoding": "gzip", "content-type": "application/json" } }));
    const response = await fetch(`${ctxr.url}/v1/models`, { headers: { "accept-encoding": "gzip" }, decompress: false } as RequestInit);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-encoding")).toBeNull();
    expect(await response.text()).toBe(payload);
    expect(upstream.last().headers["accept-encoding"]).toBe("identity");
  });
});

describe("the upstream key never leaks", () => {
  test("an upstream that echoes the key in headers and bodies (error, JSON, streamed across chunks): redacted", async () => {
    upstream.custom((r) => {
      const auth = r.headers.authorization ?? "";
      if (r.path === "/v1/models") return Response.json({ error: { message: `bad credentials: ${auth}` } }, { status: 401, headers: { "x-echo": auth } });
      if (r.json?.stream !== true) return Response.json({ echoed: auth });
      // The key split across SSE chunks.
      const text = `data: {"note": "${auth}"}\n\n`;
      const cut = text.indexOf(KEY) + 7;
      const parts = [text.slice(0, cut), text.slice(cut), "data: [DONE]\n\n"];
      let i = 0;
      return new Response(
        new ReadableStream({
          async pull(controller) {
            await sleep(10);
            controller.enqueue(new TextEncoder().encode(parts[i++]!));
            if (i === parts.length) controller.close();
          },
        }),
        { headers: { "content-type": "text/event-stream" } },
      );
    });
    const error = await ctxr.get("/v1/models");
    expect(error.status).toBe(401);
    expect(error.text).toContain("bad credentials: Bearer [redacted]");
    expect(error.headers.get("x-echo")).toBe("Bearer [redacted]");
    const json = await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] });
    expect(json.text).toBe('{"echoed":"Bearer [redacted]"}');
    const streamed = await streamPost(`${ctxr.url}/v1/chat/completions`, { messages: [{ role: "user", content: "hi" }], stream: true });
    expect(streamed.text).toBe('data: {"note": "Bearer [redacted]"}\n\ndata: [DONE]\n\n');
    for (const text of [error.text, json.text, streamed.text, JSON.stringify([...error.headers]), (await ctxr.get("/v1/stats")).text, (await ctxr.get("/metrics")).text, (await ctxr.get("/openapi.json")).text]) {
      expect(text).not.toContain(KEY);
    }
  });

  test("credentials in an upstream URL become Basic auth and appear nowhere: stats, metrics, logs, errors", async () => {
    const dead = await startFakeUpstream();
    const port = dead.port;
    await dead.stop();
    const secret = "pa55-word-in-url";
    const server = await startProxy({ upstreams: [`http://user:${secret}@127.0.0.1:${port}/v1`], backoffMs: 50 });
    try {
      const answer = await server.post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] });
      expect(answer.status).toBe(502);
      const stats = (await server.get("/v1/stats")).body.upstreams[0];
      expect(stats.url).toBe(`http://127.0.0.1:${port}/v1`);
      expect(stats.healthy).toBe(false);
      const seen = [answer.text, JSON.stringify(stats), (await server.get("/metrics")).text, ...server.logs];
      expect(server.logs.join("")).toContain(`upstream http://127.0.0.1:${port}/v1 unreachable`);
      for (const text of seen) expect(text).not.toContain(secret);
      // Once it is up, requests carry the credentials as Basic auth and go to <prefix>/chat/completions.
      const revived = await startFakeUpstream({ port });
      try {
        await sleep(60);
        expect((await server.post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] })).status).toBe(200);
        expect(revived.last().path).toBe("/v1/chat/completions");
        expect(revived.last().headers.authorization).toBe(`Basic ${Buffer.from(`user:${secret}`).toString("base64")}`);
      } finally {
        await revived.stop();
      }
    } finally {
      await server.close();
    }
  });
});

describe("client authentication with --api-key", () => {
  test("proxied routes need ctxr's key; the client's credentials are not forwarded", async () => {
    const own = await startFakeUpstream();
    const server = await startProxy({ upstreams: [own.url] }, { apiKey: "ctxr-key" });
    try {
      expect((await server.post("/v1/chat/completions", { messages: [] })).status).toBe(401);
      expect((await server.get("/v1/models")).status).toBe(401);
      expect((await server.get("/v1/models", { authorization: "Bearer wrong" })).status).toBe(401);
      expect(own.requests.length).toBe(0);
      expect((await server.get("/v1/models", { authorization: "Bearer ctxr-key" })).status).toBe(200);
      expect(own.last().headers.authorization).toBeUndefined();
      expect((await server.post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }] }, { "x-api-key": "ctxr-key" })).status).toBe(200);
      expect(own.last().headers["x-api-key"]).toBeUndefined();
      // /v1/stats stays open, like before.
      expect((await server.get("/v1/stats")).status).toBe(200);
    } finally {
      await server.close();
      await own.stop();
    }
  });

  test("without ctxr's key and without an upstream key, the client's Authorization goes upstream as sent", async () => {
    const own = await startFakeUpstream();
    const server = await startProxy({ upstreams: [own.url] });
    try {
      await server.get("/v1/models", { authorization: "Bearer client-own-key" });
      expect(own.last().headers.authorization).toBe("Bearer client-own-key");
    } finally {
      await server.close();
      await own.stop();
    }
  });
});

describe("limits", () => {
  test("a body over --max-body-bytes is a 413 on proxied routes, declared or streamed, and is not forwarded", async () => {
    const own = await startFakeUpstream();
    const server = await startProxy({ upstreams: [own.url] }, { limits: { maxBodyBytes: 1000 } });
    try {
      const big = { messages: [{ role: "user", content: "x".repeat(2000) }] };
      const answer = await server.post("/v1/chat/completions", big);
      expect(answer.status).toBe(413);
      expect(answer.body.error.field).toBe("body");
      expect((await server.post("/v1/embeddings", big)).status).toBe(413);
      const chunked = new ReadableStream<Uint8Array>({
        start(controller) {
          for (let i = 0; i < 4; i++) controller.enqueue(new TextEncoder().encode("y".repeat(400)));
          controller.close();
        },
      });
      expect((await server.request("POST", "/v1/completions", { body: chunked, headers: { "content-type": "application/json" } })).status).toBe(413);
      expect(own.requests.length).toBe(0);
      expect((await server.post("/v1/chat/completions", { messages: [{ role: "user", content: "small" }] })).status).toBe(200);
    } finally {
      await server.close();
      await own.stop();
    }
  });
});

describe("engines", () => {
  test("sglang gets rid, openai and llamacpp get no id field", async () => {
    for (const [engine, field] of [["sglang", "rid"], ["openai", null], ["llamacpp", null]] as const) {
      const own = await startFakeUpstream();
      const server = await startProxy({ upstreams: [own.url], engine });
      try {
        await server.post("/v1/chat/completions", { messages: [{ role: "user", content: "Q" }], documents: docs("z1", "z2") });
        const forwarded = own.last().json;
        expect(Object.keys(forwarded)).toEqual(field === null ? ["messages"] : ["messages", field]);
        if (field !== null) expect(forwarded[field]).toMatch(/^ctxr-[0-9a-f]{32}$/);
      } finally {
        await server.close();
        await own.stop();
      }
    }
  });
});

describe("cache sync: POST /v1/evict with engine KV events", () => {
  const send = async (content: string, documents: { id: string; text: string }[]) => {
    const answer = await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content }], documents });
    return answer.body.id as string;
  };

  test("BlockRemoved with the ids the engine reports; unknown event types ignored; vLLM-style batches and lists of batches", async () => {
    const ids = [await send("1", docs("k1", "k2")), await send("2", docs("k3", "k4")), await send("3", docs("k5", "k6"))];
    expect((await ctxr.get("/v1/stats")).body.contexts).toBe(3);
    const one = await ctxr.post("/v1/evict", { events: [{ type: "BlockStored", block_hashes: [1, 2], parent_block_hash: null }, { type: "BlockRemoved", request_ids: [ids[0]] }] });
    expect(one.body).toEqual({ evicted: 1 });
    const vllm = await ctxr.post("/v1/evict", { ts: 1718000000.25, data_parallel_rank: 0, events: [{ type: "BlockRemoved", request_ids: [`${ids[1]}-0-1a2b3c4d`.replace("chatcmpl-", "cmpl-")] }] });
    expect(vllm.body).toEqual({ evicted: 1 });
    const list = await ctxr.post("/v1/evict", [{ events: [["BlockStored", [1], null]] }, { events: [{ type: "BlockRemoved", request_ids: [ids[2], "ctxr-unknown"] }] }]);
    expect(list.body).toEqual({ evicted: 1 });
    expect((await ctxr.get("/v1/stats")).body.contexts).toBe(0);
  });

  test("AllBlocksCleared removes every context but keeps conversations", async () => {
    await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content: "Q" }], documents: docs("c1", "c2"), ctxr: { conversation_id: "keep" } });
    await send("x", docs("c3", "c4"));
    const before = (await ctxr.get("/v1/stats")).body;
    expect(before.contexts).toBe(2);
    expect((await ctxr.post("/v1/evict", { events: [{ type: "AllBlocksCleared" }] })).body).toEqual({ evicted: 2 });
    const after = (await ctxr.get("/v1/stats")).body;
    expect(after.contexts).toBe(0);
    expect(after.conversations).toBe(before.conversations);
    expect((await ctxr.post("/v1/evict", [{ events: [["AllBlocksCleared"]], upstream: upstream.url }])).body).toEqual({ evicted: 0 });
  });

  test("bad batches are 400s naming the field", async () => {
    const cases: [unknown, string][] = [
      [{ events: "x" }, "events"],
      [{ events: [{ request_ids: ["a"] }] }, "events[0].type"],
      [{ events: [{ type: "BlockRemoved", request_ids: [7] }] }, "events[0].request_ids[0]"],
      [{ events: [{ type: "AllBlocksCleared" }], upstream: "http://nowhere:1" }, "upstream"],
      [{ request_ids: "x" }, "request_ids"],
      [{}, "request_ids"],
      [[], "body"],
    ];
    for (const [body, field] of cases) {
      const answer = await ctxr.post("/v1/evict", body);
      expect({ body, status: answer.status, field: answer.body?.error?.field }).toEqual({ body, status: 400, field });
    }
  });
});

describe("stats, metrics and the OpenAPI document", () => {
  test("/metrics has the upstream series; /openapi.json documents the proxied routes and the evict forms", async () => {
    await ctxr.post("/v1/chat/completions", { messages: [{ role: "user", content: "Q" }], documents: docs("m1", "m2") });
    await ctxr.get("/v1/models");
    const metrics = (await ctxr.get("/metrics")).text;
    const label = `upstream="${upstream.url}"`;
    for (const name of ["ctxr_upstream_healthy", "ctxr_upstream_in_flight", "ctxr_upstream_requests_total", "ctxr_upstream_prompt_tokens_received_total", "ctxr_upstream_prompt_tokens_forwarded_total", "ctxr_upstream_documents_total", "ctxr_upstream_documents_deduplicated_total", "ctxr_upstream_estimated_cached_tokens_total", "ctxr_upstream_cached_tokens_total"]) {
      expect(metrics).toContain(`# TYPE ${name} `);
      expect(metrics).toMatch(new RegExp(`^${name}\\{${label.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}\\} \\d+$`, "m"));
    }
    expect(metrics).toContain('ctxr_http_requests_total{route="/v1/chat/completions",method="POST",status="200"}');
    expect(metrics).toContain('ctxr_http_requests_total{route="/v1/* (passthrough)",method="GET",status="200"}');

    const document = (await ctxr.get("/openapi.json")).body;
    for (const path of ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/{path}"]) expect(document.paths[path]).toBeDefined();
    expect(Object.keys(document.paths["/v1/{path}"]).sort()).toEqual(["delete", "get", "patch", "post", "put"]);
    expect(document.paths["/v1/chat/completions"].post.requestBody.content["application/json"].schema.$ref).toBe("#/components/schemas/ProxyChatCompletionRequest");
    const evict = document.components.schemas.EvictRequest;
    expect(JSON.stringify(evict)).toContain("KvEventBatch");
    expect(document.components.schemas.StatsResponse.properties.upstreams).toBeDefined();
  });
});
