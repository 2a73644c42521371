/** The proxy's parts on their own: upstream URLs, header policy, redaction, usage scanning, KV events, routing and health. */
import { describe, expect, test } from "bun:test";
import { requestIdField, setEngineRequestId } from "../../src/proxy/engineRequestId.ts";
import { relayBody, relayedResponseHeaders, upstreamRequestHeaders, UsageScanner } from "../../src/proxy/forwarder.ts";
import { applyEvictBody, type EvictBody } from "../../src/proxy/kvEvents.ts";
import { redactText, StreamRedactor, usableSecrets } from "../../src/proxy/redact.ts";
import { chatRoutingPlan, completionRoutingPlan, EMPTY_PLAN } from "../../src/proxy/routingKeys.ts";
import { UpstreamPool } from "../../src/proxy/upstreamPool.ts";
import { parseUpstreamUrl, upstreamRequestUrl } from "../../src/proxy/upstreamTarget.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

describe("upstream URLs", () => {
  test("an API root ending in /v1 takes the path after /v1; another prefix is prepended; the upstream's query comes first", () => {
    const root = parseUpstreamUrl("https://api.example.com/v1/");
    expect(root.url).toBe("https://api.example.com/v1");
    expect(upstreamRequestUrl(root, "/v1/chat/completions", "")).toBe("https://api.example.com/v1/chat/completions");
    const bare = parseUpstreamUrl("http://127.0.0.1:8000");
    expect(upstreamRequestUrl(bare, "/v1/models", "a=1")).toBe("http://127.0.0.1:8000/v1/models?a=1");
    const prefixed = parseUpstreamUrl("http://gw.local/openai?api-version=2024");
    expect(prefixed.url).toBe("http://gw.local/openai");
    expect(upstreamRequestUrl(prefixed, "/v1/completions", "x=y")).toBe("http://gw.local/openai/v1/completions?api-version=2024&x=y");
  });

  test("credentials become Basic auth and are not in the display URL; bad URLs are errors without credentials", () => {
    const target = parseUpstreamUrl("http://us%40er:p%3Ass@host:9/v1");
    expect(target.url).toBe("http://host:9/v1");
    expect(target.basicAuthorization).toBe(`Basic ${Buffer.from("us@er:p:ss").toString("base64")}`);
    for (const secret of ["p:ss", "p%3Ass", "us@er", "us%40er", Buffer.from("us@er:p:ss").toString("base64")]) expect(target.secrets).toContain(secret);
    // Not valid percent-encoding: used as written.
    expect(parseUpstreamUrl("http://u:100%zz@host").secrets).toContain("100%zz");
    expect(() => parseUpstreamUrl("ftp://host")).toThrow("http:// or https://");
    expect(() => parseUpstreamUrl("http://host/#x")).toThrow("fragment");
    let message = "";
    try {
      parseUpstreamUrl("notaurl//user:hunter2@");
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toContain("not a URL");
    expect(message).not.toContain("hunter2");
  });
});

describe("engine request ids", () => {
  test("vllm: request_id, sglang: rid, openai and llamacpp: none; a client's value is replaced; null sets nothing", () => {
    expect(["vllm", "sglang", "openai", "llamacpp"].map((e) => requestIdField(e as never))).toEqual(["request_id", "rid", null, null]);
    const body: Record<string, unknown> = { request_id: "client", x: 1 };
    setEngineRequestId(body, "vllm", "ctxr-1");
    expect(body).toEqual({ request_id: "ctxr-1", x: 1 });
    setEngineRequestId(body, "sglang", null);
    expect(body.rid).toBeUndefined();
  });
});

describe("headers", () => {
  const client = new Headers({
    authorization: "Bearer client",
    "x-api-key": "client",
    connection: "close, x-private",
    "x-private": "p",
    "keep-alive": "timeout=5",
    "transfer-encoding": "chunked",
    upgrade: "h2c",
    "proxy-authorization": "Basic x",
    host: "ctxr:8765",
    "content-length": "12",
    "x-kept": "yes",
  });

  test("hop-by-hop headers (and those Connection names) are dropped; credentials kept, replaced or dropped by policy", () => {
    const plain = upstreamRequestHeaders(client, { dropClientCredentials: false, authorization: null });
    expect([...plain.keys()].sort()).toEqual(["accept-encoding", "authorization", "x-api-key", "x-kept"]);
    // Without the client's Accept-Encoding, identity (the relayed bytes are not decoded).
    expect(plain.get("accept-encoding")).toBe("identity");
    expect(upstreamRequestHeaders(new Headers({ "accept-encoding": "br", expect: "100-continue" }), { dropClientCredentials: false, authorization: null }).get("accept-encoding")).toBe("br");
    const keyed = upstreamRequestHeaders(client, { dropClientCredentials: false, authorization: "Bearer up", acceptEncoding: "identity", defaultContentType: "application/json" });
    expect(keyed.get("authorization")).toBe("Bearer up");
    expect(keyed.get("accept-encoding")).toBe("identity");
    expect(keyed.get("content-type")).toBe("application/json");
    const forCtxr = upstreamRequestHeaders(client, { dropClientCredentials: true, authorization: null });
    expect(forCtxr.has("authorization") || forCtxr.has("x-api-key")).toBe(false);
  });

  test("relayed response headers: hop-by-hop and content-encoding of a decompressed body dropped, secrets redacted", () => {
    const upstream = new Headers({ "content-type": "text/event-stream", "content-encoding": "gzip", "content-length": "10", "x-echo": "Bearer sk-secret-key", "x-sk-secret-key": "1", "x-ok": "1" });
    const relayed = relayedResponseHeaders(upstream, { decompressed: true, secrets: ["sk-secret-key"] });
    expect([...relayed.keys()].sort()).toEqual(["content-type", "x-echo", "x-ok"]);
    expect(relayed.get("x-echo")).toBe("Bearer [redacted]");
    expect(relayedResponseHeaders(upstream, { decompressed: false, secrets: [] }).get("content-encoding")).toBe("gzip");
  });
});

describe("redaction", () => {
  test("a secret is replaced wherever it falls across chunks; nothing else is held back", () => {
    const secret = "sk-abcdef123456";
    const text = `start ${secret} middle ${secret}${secret} end s`;
    for (let cut1 = 0; cut1 < text.length; cut1 += 3) {
      for (let cut2 = cut1; cut2 < text.length; cut2 += 5) {
        const redactor = new StreamRedactor([secret]);
        const parts = [text.slice(0, cut1), text.slice(cut1, cut2), text.slice(cut2)].map((p) => decoder.decode(redactor.push(encoder.encode(p))));
        const out = parts.join("") + decoder.decode(redactor.flush());
        expect(out).toBe("start [redacted] middle [redacted][redacted] end s");
      }
    }
    // An SSE chunk is passed on whole at once.
    const redactor = new StreamRedactor([secret]);
    expect(decoder.decode(redactor.push(encoder.encode('data: {"a": 1}\n\n')))).toBe('data: {"a": 1}\n\n');
  });

  test("text redaction: secrets of any length (empty ones dropped), also as JSON encoders write them", () => {
    expect(usableSecrets(["", null, undefined, "k", "abcd", "abcd"])).toEqual(["k", "abcd"]);
    expect(redactText("key=abcd!", ["abcd"])).toBe("key=[redacted]!");
    expect(redactText("a k1 in k1k1", usableSecrets(["k1"]))).toBe("a [redacted] in [redacted][redacted]");
    const odd = usableSecrets(['a"b/c\\dé']);
    const echoed = JSON.stringify({ raw: 'a"b/c\\dé' }) + JSON.stringify('a"b/c\\dé').replaceAll("/", "\\/") + '"a\\"b/c\\\\d\\u00e9"';
    expect(redactText(echoed, odd)).toBe('{"raw":"[redacted]"}"[redacted]""[redacted]"');
  });

  test("overlapping secrets are redacted as one span, in text and across chunks", () => {
    const secrets = ["abcdef", "defghi", "aa"];
    const text = "x abcdefghi y aaaaa z";
    expect(redactText(text, secrets)).toBe("x [redacted] y [redacted] z");
    for (let cut1 = 0; cut1 <= text.length; cut1++) {
      for (let cut2 = cut1; cut2 <= text.length; cut2++) {
        const redactor = new StreamRedactor(secrets);
        const parts = [text.slice(0, cut1), text.slice(cut1, cut2), text.slice(cut2)].map((p) => decoder.decode(redactor.push(encoder.encode(p))));
        expect(parts.join("") + decoder.decode(redactor.flush())).toBe("x [redacted] y [redacted] z");
      }
    }
    // One byte at a time: a short secret is never held back, a long one only while it may be starting.
    const redactor = new StreamRedactor(["k1", "sk-long-key"]);
    const sent = [..."k1 sk-long-ke sk-long-key k"].map((ch) => decoder.decode(redactor.push(encoder.encode(ch))));
    expect(sent.join("") + decoder.decode(redactor.flush())).toBe("[redacted] sk-long-ke [redacted] k");
    expect(sent.at(-1)).toBe("");
  });
});

describe("usage scanning", () => {
  const scan = (format: "sse" | "json", parts: string[]) => {
    const scanner = new UsageScanner(format);
    for (const part of parts) scanner.push(encoder.encode(part));
    return scanner.finish();
  };

  test("SSE: the last usage wins, lines split across chunks are joined", () => {
    const usage1 = 'data: {"choices":[],"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":3}}}\n\n';
    const usage2 = 'data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":7}}}\n\n';
    const text = `data: {"choices":[{"delta":{"content":"usage"}}]}\n\n${usage1}${usage2}data: [DONE]\n\n`;
    for (let cut = 0; cut < text.length; cut += 7) expect(scan("sse", [text.slice(0, cut), text.slice(cut)])).toEqual({ promptTokens: 10, completionTokens: 6, cachedTokens: 7, chunkReusedTokens: null, recomputedTokens: null });
    expect(scan("sse", ['data: {"choices":[]}\n\n'])).toBeNull();
    expect(scan("sse", ['data: {"usage": {"prompt_tokens": 5, "prompt_tokens_details": null}}\n\n'])).toEqual({ promptTokens: 5, completionTokens: null, cachedTokens: null, chunkReusedTokens: null, recomputedTokens: null });
  });

  test("JSON: usage of the whole body; malformed bodies report nothing", () => {
    const body = JSON.stringify({ id: "x", usage: { prompt_tokens: 4, prompt_tokens_details: { cached_tokens: 2 } } });
    expect(scan("json", [body.slice(0, 9), body.slice(9)])).toEqual({ promptTokens: 4, completionTokens: null, cachedTokens: 2, chunkReusedTokens: null, recomputedTokens: null });
    expect(scan("json", ["{broken"])).toBeNull();
    const ctxrUsage = JSON.stringify({ usage: { prompt_tokens: 40, prompt_tokens_details: { cached_tokens: 16 }, ctxr: { prompt_tokens_chunk_reused: 12, prompt_tokens_recomputed: 3 } } });
    expect(scan("json", [ctxrUsage])).toEqual({ promptTokens: 40, completionTokens: null, cachedTokens: 16, chunkReusedTokens: 12, recomputedTokens: 3 });
    expect(scan("json", ['{"usage": {"prompt_tokens": -1, "prompt_tokens_details": {"cached_tokens": "3"}}}'])).toEqual({ promptTokens: null, completionTokens: null, cachedTokens: null, chunkReusedTokens: null, recomputedTokens: null });
  });

  test("relayBody hands each chunk on, reports usage once at the end, and once on cancel", async () => {
    const outcomes: unknown[] = [];
    const source = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode('data: {"usage":{"prompt_tokens_details":{"cached_tokens":5}}}\n\n'));
        controller.enqueue(encoder.encode("data: [DONE]\n\n"));
        controller.close();
      },
    });
    const relayed = relayBody(source, { scan: "sse", secrets: [], onDone: (o) => outcomes.push(o) })!;
    const chunks: string[] = [];
    for await (const chunk of relayed) chunks.push(decoder.decode(chunk));
    expect(chunks).toEqual(['data: {"usage":{"prompt_tokens_details":{"cached_tokens":5}}}\n\n', "data: [DONE]\n\n"]);
    expect(outcomes).toEqual([{ usage: { promptTokens: null, completionTokens: null, cachedTokens: 5, chunkReusedTokens: null, recomputedTokens: null }, error: null }]);

    let cancelled = false;
    const endless = new ReadableStream<Uint8Array>({
      pull: (controller) => controller.enqueue(encoder.encode("x")),
      cancel: () => void (cancelled = true),
    });
    const done: unknown[] = [];
    const stream = relayBody(endless, { scan: null, secrets: [], onDone: (o) => done.push(o) })!;
    const reader = stream.getReader();
    await reader.read();
    await reader.cancel();
    expect(cancelled).toBe(true);
    expect(done.length).toBe(1);
    expect(relayBody(null, { scan: null, secrets: [], onDone: (o) => done.push(o) })).toBeNull();
    expect(done.length).toBe(2);
  });
});

describe("KV events", () => {
  const target = () => {
    const calls: string[] = [];
    return {
      calls,
      evict: async (ids: string[]) => {
        calls.push(`evict ${ids.join(",")}`);
        return ids.length;
      },
      clearEngine: async (selector: string | number | undefined, field: string) => {
        calls.push(`clear ${selector ?? "all"} (${field})`);
        return 10;
      },
    };
  };

  test("events apply in order; removals are batched between clears; other types ignored", async () => {
    const t = target();
    const body: EvictBody = [
      { events: [{ type: "BlockRemoved", request_ids: ["a", "b"] }, { type: "BlockStored" }, ["BlockRemoved", [1]], { type: "BlockRemoved" }] },
      { events: [{ type: "BlockRemoved", request_ids: ["c"] }, ["AllBlocksCleared"], { type: "BlockRemoved", request_ids: ["d"] }], upstream: 1 },
    ];
    expect(await applyEvictBody(body, t)).toBe(14);
    expect(t.calls).toEqual(["evict a,b,c", "clear 1 ([1].upstream)", "evict d"]);
  });

  test("request ids as before; a single batch names its upstream field plainly", async () => {
    const t = target();
    expect(await applyEvictBody({ request_ids: ["x"] }, t)).toBe(1);
    expect(await applyEvictBody({ ts: 1, events: [{ type: "AllBlocksCleared" }] }, t)).toBe(10);
    expect(t.calls).toEqual(["evict x", "clear all (upstream)"]);
  });
});

describe("routing plans", () => {
  test("chat: earlier messages then the documents; the whole message list for the next turn", () => {
    const body = { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "x".repeat(400) }] };
    const plan = chatRoutingPlan(body, { documentKeys: ["t:1", "t:2"], forwardedTokens: 103 });
    expect(plan.lookup.map((k) => k.key.slice(0, 2))).toEqual(["m:", "d:", "d:"]);
    expect(plan.lookup[1]!.tokens).toBe(50);
    expect(plan.turn!.length).toBe(2);
    expect(plan.turn![0]).toEqual(plan.lookup[0]!);
    // The same message at another position is another key.
    const shifted = chatRoutingPlan({ messages: [{ role: "user", content: "x".repeat(400) }, { role: "user", content: "y" }] }, { documentKeys: [], forwardedTokens: 0 });
    expect(shifted.lookup[0]!.key).not.toBe(plan.turn![1]!.key);
    expect(completionRoutingPlan({ documentKeys: ["t:9"], forwardedTokens: 7 })).toEqual({ lookup: [{ key: "d:t:9", tokens: 7 }], turn: null });
  });
});

describe("UpstreamPool", () => {
  const targets = (n: number) => Array.from({ length: n }, (_, i) => parseUpstreamUrl(`http://u${i}:80`));
  const plan = (...keys: string[]) => ({ lookup: keys.map((key) => ({ key, tokens: 10 })), turn: null });

  test("longest prefix above the threshold wins; below it, on ties and without a plan: least in flight, then fewest requests, then first", () => {
    const pool = new UpstreamPool(targets(3), { cacheThreshold: 0.5 });
    const [u0, u1, u2] = pool.upstreams as [any, any, any];
    pool.record(u1, plan("a", "b", "c", "d"), "ctxr-1");
    pool.record(u2, plan("a", "x"), "ctxr-2");
    expect(pool.choose(plan("a", "b", "c", "e"))).toBe(u1);
    // a-x: u2 holds half of it (the threshold) — chosen.
    expect(pool.choose(plan("a", "x", "y", "z"))).toBe(u2);
    // Only "a" (1 of 4) anywhere: by load; all idle with no requests: the first.
    expect(pool.choose(plan("a", "q", "r", "s"))).toBe(u0);
    u0.inFlight = 2;
    u1.counters.requests = 5;
    expect(pool.choose(plan("a", "q", "r", "s"))).toBe(u2);
    expect(pool.choose(EMPTY_PLAN)).toBe(u2);
    // Ties between holders: the less busy one.
    pool.record(u0, plan("a", "b", "c", "d"), "ctxr-3");
    expect(pool.choose(plan("a", "b", "c", "d"))).toBe(u1);
  });

  test("a holder far busier than the least busy upstream loses to it", () => {
    const pool = new UpstreamPool(targets(2), { balanceSlack: 4 });
    const [u0, u1] = pool.upstreams as [any, any];
    pool.record(u0, plan("a", "b"), "ctxr-1");
    u0.inFlight = 4;
    expect(pool.choose(plan("a", "b"))).toBe(u0);
    u0.inFlight = 5;
    expect(pool.choose(plan("a", "b"))).toBe(u1);
  });

  test("evicted request ids (as engines report them) and cleared upstreams are forgotten", () => {
    const pool = new UpstreamPool(targets(2));
    const [u0, u1] = pool.upstreams as [any, any];
    pool.record(u1, { lookup: plan("a", "b").lookup, turn: plan("m1", "m2").lookup }, "ctxr-1");
    pool.record(u1, plan("c"), "ctxr-2");
    pool.record(u1, plan("z"), null);
    expect(pool.requestIdsOf(u1).sort()).toEqual(["ctxr-1", "ctxr-2"]);
    expect(pool.choose(plan("m1", "m2"))).toBe(u1);
    pool.evict(["chatcmpl-ctxr-1"]);
    expect(pool.choose(plan("a", "b"))).toBe(u0);
    expect(pool.choose(plan("m1", "m2"))).toBe(u0);
    expect(pool.requestIdsOf(u1)).toEqual(["ctxr-2"]);
    pool.clear(u1);
    expect(pool.requestIdsOf(u1)).toEqual([]);
    expect(pool.find("http://u1:80/")).toBe(u1);
    expect(pool.find(0)).toBe(u0);
    expect(pool.find("http://nope")).toBeUndefined();
  });

  test("a capacity forgets least recently used contexts", () => {
    const pool = new UpstreamPool(targets(2), { capacityTokens: 25 });
    const [u0, u1] = pool.upstreams as [any, any];
    pool.record(u1, plan("a", "b"), "ctxr-1");
    pool.record(u1, plan("c", "d"), "ctxr-2");
    expect(pool.requestIdsOf(u1)).toEqual(["ctxr-2"]);
    expect(pool.choose(plan("a", "b"))).toBe(u0);
  });

  test("health: out of rotation after a failure, back when due; backoff doubles to its maximum; none available: null", () => {
    let now = 1000;
    const pool = new UpstreamPool(targets(2), { backoffMs: 100, maxBackoffMs: 300, now: () => now });
    const [u0, u1] = pool.upstreams as [any, any];
    expect(pool.markDown(u0, "refused")).toBe(100);
    expect(pool.choose(EMPTY_PLAN)).toBe(u1);
    expect(pool.choose(EMPTY_PLAN, new Set([u1]))).toBeNull();
    now += 100;
    expect(u0.available(now)).toBe(true);
    expect(pool.markDown(u0, "refused")).toBe(200);
    expect(pool.markDown(u0, "refused")).toBe(300);
    expect(pool.markDown(u0, "refused")).toBe(300);
    expect(u0.consecutiveFailures).toBe(4);
    expect(u0.markUp()).toBe(true);
    expect(u0.markUp()).toBe(false);
    expect(pool.markDown(u0, "refused")).toBe(100);
  });
});
