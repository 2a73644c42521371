/**
 * No upstream secret reaches a client, whatever coding the answer came in: a
 * real ctxr server (in process, Bun.serve, real fetch) in front of an upstream
 * that echoes the request headers (echoUpstream.ts), in every coding, as a
 * JSON answer and as an SSE stream, on a passthrough route and on
 * /v1/chat/completions, from an upstream that honours Accept-Encoding and one
 * that ignores it; with a long key, a short key ("k1") and credentials in the
 * upstream URL. The client asks for compression (the way a leak was found)
 * and reads the raw bytes, decoding them itself where they are encoded.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import zlib from "node:zlib";
import { startProxy, waitFor, type ProxyServer } from "../proxy/proxyKit.ts";
import { CODINGS, startEchoUpstream, type EchoUpstream } from "./echoUpstream.ts";

const LONG_KEY = "sk-upstream-key-0123456789abcdef";
const SHORT_KEY = "k1";
const URL_USER = "ctxr-svc";
const URL_PASSWORD_WRITTEN = "p%40ss%3Aw0rd";
const URL_PASSWORD = "p@ss:w0rd";
const BASIC = Buffer.from(`${URL_USER}:${URL_PASSWORD}`).toString("base64");
/** What the client sends: it would take any compression. */
const CLIENT_ACCEPT = "gzip, deflate, br, zstd";

interface Setup {
  name: string;
  /** What the upstream must have received as Authorization (so the echo did carry the secret). */
  authorization: string;
  /** Strings that must appear in no answer. */
  secrets: string[];
  start(upstream: EchoUpstream): Promise<ProxyServer>;
}

const SETUPS: Setup[] = [
  {
    name: "a long --upstream-key",
    authorization: `Bearer ${LONG_KEY}`,
    secrets: [LONG_KEY],
    start: (upstream) => startProxy({ upstreams: [upstream.url], upstreamKey: LONG_KEY }),
  },
  {
    name: 'a short --upstream-key ("k1")',
    authorization: `Bearer ${SHORT_KEY}`,
    secrets: [SHORT_KEY],
    start: (upstream) => startProxy({ upstreams: [upstream.url], upstreamKey: SHORT_KEY }),
  },
  {
    name: "credentials in the upstream URL",
    authorization: `Basic ${BASIC}`,
    secrets: [URL_USER, URL_PASSWORD, URL_PASSWORD_WRITTEN, BASIC],
    start: (upstream) => startProxy({ upstreams: [`http://${URL_USER}:${URL_PASSWORD_WRITTEN}@127.0.0.1:${upstream.port}`] }),
  },
];

/** The client's own decoding of an answer, for whatever Content-Encoding ctxr relayed. */
function decodeAnswer(bytes: Uint8Array, contentEncoding: string | null): string {
  let out = Buffer.from(bytes);
  const codings = (contentEncoding ?? "").split(",").map((c) => c.trim().toLowerCase()).filter((c) => c !== "" && c !== "identity");
  for (const coding of codings.reverse()) {
    if (coding === "gzip" || coding === "x-gzip") out = zlib.gunzipSync(out);
    else if (coding === "deflate") out = zlib.inflateSync(out);
    else if (coding === "br") out = zlib.brotliDecompressSync(out);
    else if (coding === "zstd") out = zlib.zstdDecompressSync(out);
    else throw new Error(`the test cannot decode ${coding}`);
  }
  return out.toString("utf8");
}

interface RawAnswer {
  status: number;
  headers: Headers;
  /** Chunks as they arrived (raw bytes), with the time of each. */
  chunks: { bytes: Uint8Array; at: number }[];
  raw: Uint8Array;
  /** The body decoded by the test. */
  text: string;
}

async function ask(url: string, init: { method: string; body?: unknown; headers: Record<string, string> }): Promise<RawAnswer> {
  const response = await fetch(url, {
    method: init.method,
    headers: { "accept-encoding": CLIENT_ACCEPT, ...(init.body === undefined ? {} : { "content-type": "application/json" }), ...init.headers },
    body: init.body === undefined ? null : JSON.stringify(init.body),
    decompress: false,
  } as RequestInit);
  const chunks: { bytes: Uint8Array; at: number }[] = [];
  const reader = response.body!.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push({ bytes: value, at: performance.now() });
  }
  const raw = new Uint8Array(Buffer.concat(chunks.map((c) => c.bytes)));
  return { status: response.status, headers: response.headers, chunks, raw, text: decodeAnswer(raw, response.headers.get("content-encoding")) };
}

function expectNoSecret(answer: RawAnswer, secrets: readonly string[]): void {
  const rawText = Buffer.from(answer.raw).toString("latin1");
  const headerText = [...answer.headers].map(([name, value]) => `${name}: ${value}`).join("\n");
  for (const secret of secrets) {
    expect(answer.text).not.toContain(secret);
    expect(rawText).not.toContain(secret);
    expect(headerText).not.toContain(secret);
  }
}

/** The echoed request out of a JSON answer's message, or out of an SSE stream's content lines. */
function echoedHeaders(answer: RawAnswer, streamed: boolean): Record<string, string> {
  if (!streamed) return JSON.parse(JSON.parse(answer.text).choices[0].message.content).headers;
  expect(answer.headers.get("content-type")).toStartWith("text/event-stream");
  const events = answer.text.split("\n\n").filter((e) => e !== "");
  expect(events.at(-1)).toBe("data: [DONE]");
  const content = events
    .slice(0, -1)
    .map((event) => JSON.parse(event.slice("data: ".length)))
    .map((chunk) => chunk.choices[0]?.delta?.content ?? "")
    .join("");
  const headers: Record<string, string> = {};
  for (const line of content.split("\n").filter((l: string) => l !== "")) {
    const at = line.indexOf(": ");
    headers[line.slice(0, at)] = line.slice(at + 2);
  }
  return headers;
}

const ROUTES = [
  { name: "passthrough POST /v1/embeddings", method: "POST", path: "/v1/embeddings", body: (stream: boolean) => ({ model: "e", input: "hello", stream }) },
  { name: "passthrough GET /v1/models", method: "GET", path: "/v1/models", query: (stream: boolean) => (stream ? "?stream=1" : ""), body: () => undefined },
  { name: "POST /v1/chat/completions", method: "POST", path: "/v1/chat/completions", body: (stream: boolean) => ({ model: "m", messages: [{ role: "user", content: "hello" }], stream }) },
] as const;

let upstream: EchoUpstream;
const servers = new Map<string, ProxyServer>();
beforeAll(async () => {
  upstream = await startEchoUpstream({ delayMs: 1 });
  for (const setup of SETUPS) servers.set(setup.name, await setup.start(upstream));
});
afterAll(async () => {
  for (const server of servers.values()) await server.close();
  await upstream.stop();
});

test("the runtime's codings under test", () => {
  // zstd is covered where node:zlib has it (Bun does).
  expect(CODINGS.slice(0, 4)).toEqual(["identity", "gzip", "deflate", "br"]);
});

for (const setup of SETUPS) {
  describe(`with ${setup.name}`, () => {
    for (const coding of CODINGS) {
      test(`${coding} answers, JSON and SSE, passthrough and chat, honouring or ignoring Accept-Encoding: the secret appears in none`, async () => {
        const ctxr = servers.get(setup.name)!;
        for (const route of ROUTES) {
          for (const stream of [false, true]) {
            for (const ignore of [false, true]) {
              const before = upstream.requests.length;
              const query = "query" in route ? route.query(stream) : "";
              const answer = await ask(`${ctxr.url}${route.path}${query}`, {
                method: route.method,
                body: route.body(stream),
                headers: { "x-echo-coding": coding, ...(ignore ? { "x-echo-ignore-accept-encoding": "1" } : {}) },
              });
              const where = `${route.name} stream=${stream} ignore=${ignore}`;
              expect({ where, status: answer.status }).toEqual({ where, status: 200 });
              // The upstream got the secret and was asked for an unencoded answer.
              const seen = upstream.requests[before]!;
              expect(upstream.requests.length).toBe(before + 1);
              expect(seen.headers.authorization).toBe(setup.authorization);
              expect(seen.headers["accept-encoding"]).toBe("identity");
              // ctxr relays decoded bytes, and says so.
              expect(answer.headers.get("content-encoding")).toBeNull();
              expect(answer.headers.get("content-length")).toBeNull();
              expectNoSecret(answer, setup.secrets);
              // Otherwise the answer is the echo: the secret-bearing parts redacted, the rest as sent.
              const echoed = echoedHeaders(answer, stream);
              expect(echoed["x-echo-coding"]).toBe(coding);
              expect(echoed["accept-encoding"]).toBe("identity");
              expect(echoed.authorization).toBe(setup.authorization.startsWith("Bearer") ? "Bearer [redacted]" : "Basic [redacted]");
              expect(answer.headers.get("x-echo-authorization")).toBe(echoed.authorization!);
              expect(answer.headers.get("x-echo-x-echo-coding")).toBe(coding);
              if (route.method === "POST") expect(echoed["content-type"]).toBe("application/json");
            }
          }
        }
        for (const line of ctxr.logs) for (const secret of setup.secrets) expect(line).not.toContain(secret);
      });
    }

    test("an answer in a coding ctxr cannot decode is a 502 naming it, never relayed", async () => {
      const ctxr = servers.get(setup.name)!;
      for (const coding of ["compress", "gzip, br", "x-unknown"]) {
        for (const route of ROUTES) {
          const before = upstream.requests.length;
          const answer = await ask(`${ctxr.url}${route.path}`, {
            method: route.method,
            body: route.body(false),
            headers: { "x-echo-coding": coding, "x-echo-ignore-accept-encoding": "1" },
          });
          expect(upstream.requests.length).toBe(before + 1);
          expect(upstream.requests[before]!.headers.authorization).toBe(setup.authorization);
          expect(answer.status).toBe(502);
          expect(answer.headers.get("content-type")).toStartWith("application/json");
          const error = JSON.parse(answer.text);
          expect(error.error.field).toBe("");
          expect(error.error.message).toContain(`Content-Encoding ${JSON.stringify(coding)}`);
          expectNoSecret(answer, setup.secrets);
        }
      }
      await waitFor(() => ctxr.server.inFlight === 0);
      expect(ctxr.logs.join("")).toContain("cannot decode");
      for (const line of ctxr.logs) for (const secret of setup.secrets) expect(line).not.toContain(secret);
    });
  });
}

test("a compressed SSE answer is decoded, redacted and still relayed event by event", async () => {
  const slow = await startEchoUpstream({ delayMs: 60 });
  const ctxr = await startProxy({ upstreams: [slow.url], upstreamKey: LONG_KEY });
  try {
    for (const path of ["/v1/embeddings", "/v1/chat/completions"]) {
      const answer = await ask(`${ctxr.url}${path}`, {
        method: "POST",
        body: { model: "m", messages: [{ role: "user", content: "hi" }], input: "hi", stream: true },
        headers: { "x-echo-coding": "gzip", "x-echo-ignore-accept-encoding": "1" },
      });
      expect(answer.status).toBe(200);
      expectNoSecret(answer, [LONG_KEY]);
      expect(answer.text).toContain("authorization: Bearer [redacted]");
      // Many chunks, spread over the upstream's pacing: nothing waited for the end.
      expect(answer.chunks.length).toBeGreaterThan(5);
      const span = answer.chunks.at(-1)!.at - answer.chunks[0]!.at;
      expect(span).toBeGreaterThan(60 * (answer.chunks.length - 3));
    }
  } finally {
    await ctxr.close();
    await slow.stop();
  }
});
