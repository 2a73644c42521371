/**
 * Items 3 and 4 of the hardening issue against `ctxr serve` in a child process
 * (the other tests of this folder run them in process): the upstream key in no
 * answer whatever its coding, and no 5xx and no "internal error" line for hostile
 * bodies and framing; the child's peak RSS (VmHWM) stays well under 512 MiB.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import zlib from "node:zlib";
import { chunkedParts, head, rawHttp } from "./clientInputKit.ts";
import { CODINGS, startEchoUpstream, type EchoUpstream } from "./echoUpstream.ts";
import { MiB, startCtxr, type Ctxr } from "./hostileKit.ts";

const KEY = "sk-child-process-secret-0123456789";
let upstream: EchoUpstream;
let ctxr: Ctxr;

beforeAll(async () => {
  upstream = await startEchoUpstream();
  ctxr = await startCtxr(["--upstream", upstream.url, "--upstream-key", KEY]);
});
afterAll(async () => {
  await ctxr?.stop();
  await upstream?.stop();
});

function decode(bytes: Buffer, coding: string | null): string {
  if (coding === null || coding === "identity") return bytes.toString("utf8");
  if (coding === "gzip") return zlib.gunzipSync(bytes).toString("utf8");
  if (coding === "deflate") return zlib.inflateSync(bytes).toString("utf8");
  if (coding === "br") return zlib.brotliDecompressSync(bytes).toString("utf8");
  if (coding === "zstd") return zlib.zstdDecompressSync(bytes).toString("utf8");
  throw new Error(`cannot decode ${coding}`);
}

describe("ctxr serve --upstream --upstream-key in a child process", () => {
  test("the key is in no answer, for every coding, passthrough and chat, JSON and SSE", async () => {
    let answers = 0;
    for (const coding of CODINGS) {
      for (const ignore of ["0", "1"]) {
        for (const [method, path, body] of [
          ["GET", "/v1/models", undefined],
          ["POST", "/v1/embeddings", { input: "x" }],
          ["POST", "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] }],
          ["POST", "/v1/chat/completions", { model: "m", stream: true, messages: [{ role: "user", content: "hi" }] }],
        ] as const) {
          const response = await fetch(`${ctxr.url}${path}`, {
            method,
            headers: { "accept-encoding": CODINGS.join(", "), "x-echo-coding": coding, "x-echo-ignore-accept-encoding": ignore, "content-type": "application/json" },
            body: body === undefined ? null : JSON.stringify(body),
            decompress: false,
          } as RequestInit);
          const raw = Buffer.from(await response.arrayBuffer());
          expect(response.status).toBe(200);
          const text = decode(raw, response.headers.get("content-encoding"));
          for (const seen of [text, raw.toString("latin1"), [...response.headers].join("\n")]) expect(seen).not.toContain(KEY);
          answers++;
        }
      }
    }
    // The upstream did get the key every time.
    expect(upstream.requests.length).toBeGreaterThanOrEqual(answers);
    expect(upstream.requests.every((r) => r.headers.authorization === `Bearer ${KEY}`)).toBe(true);
  }, 60_000);

  test("hostile bodies and framing: 4xx, no internal error logged, modest peak RSS", async () => {
    const deep = (depth: number) => "[".repeat(depth) + "]".repeat(depth);
    const bodies = [
      '{"model":"m","messages":[null]}',
      '{"model":"m","messages":[1,"x",[]]}',
      `{"model":"m","messages":[{"role":"user","content":${deep(100_000)}}],"documents":[{"text":"d"}]}`,
      `{"model":"m","prompt":${deep(100_000)}}`,
      `{"contexts":${deep(100_000)}}`,
    ];
    for (const [i, body] of bodies.entries()) {
      const path = i === 3 ? "/v1/completions" : i === 4 ? "/v1/reorder" : "/v1/chat/completions";
      const response = await fetch(`${ctxr.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body });
      expect(response.status).toBe(400);
      expect(((await response.json()) as { error: { message: unknown } }).error.message).toBeString();
    }
    const port = Number(new URL(ctxr.url).port);
    const framing = [
      `${head("/v1/reorder", ["Transfer-Encoding: chunked"])}\r\n\r\n${"f".repeat(100)}\r\n{}\r\n0\r\n\r\n`,
      `${head("/v1/reorder", ["Content-Length: 5", "Content-Length: 6"])}\r\n\r\n12345`,
      `${head("/v1/reorder", ["Content-Length: 5", "Transfer-Encoding: chunked"])}\r\n\r\n0\r\n\r\n`,
    ];
    for (const request of framing) {
      const answer = await rawHttp(port, [request], { timeoutMs: 3000 });
      expect(answer.status).toBe(400);
    }
    // Over the body limit, chunked: our JSON 413.
    const big = await rawHttp(port, [`${head("/v1/chat/completions", ["Transfer-Encoding: chunked"])}\r\n\r\n`, ...chunkedParts(20 * MiB)], { timeoutMs: 10_000 });
    expect(big.status).toBe(413);
    expect(big.body).toContain('"error"');
    // Still serving.
    expect((await fetch(`${ctxr.url}/healthz`)).status).toBe(200);
    expect(ctxr.stderr()).not.toMatch(/internal error/i);
    expect(ctxr.peakRss()).toBeLessThan(512 * MiB);
  }, 60_000);
});
