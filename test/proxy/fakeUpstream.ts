/**
 * A fake OpenAI-compatible engine for proxy tests: an HTTP server on port 0 that
 * records the exact bytes and headers it receives and answers
 *
 *  - POST /v1/chat/completions and /v1/completions, non-streaming (one JSON
 *    body) and streaming (SSE `data: {...}\n\n` chunks, one answer word each,
 *    `chunkDelayMs` apart, then `data: [DONE]`, with a usage chunk before it
 *    when `stream_options.include_usage` is set);
 *  - GET /v1/models; anything else 404 (recorded too).
 *
 * It reports cached tokens like vLLM's prefix cache: the prompt is the
 * message contents joined by "\n" (chat) or the prompt string (completions);
 * its tokens are its whitespace-separated words; `cached_tokens` is the
 * longest common prefix, in words, with any earlier prompt, rounded down to
 * whole blocks of `blockWords` words (default 1: exact; vLLM uses 16-token
 * blocks). The cache is a set of chained block hashes, so a lookup costs the
 * prompt's length, not the number of earlier prompts. `prompt_tokens` is the
 * prompt's word count.
 *
 * It can be told to fail (status + body), to hang (never answer until told
 * otherwise or stopped), or to answer with a custom Response (or a promise of
 * one: headers that come late). Like vLLM, it never closes a connection for
 * being idle (an answer may pause for as long as it likes).
 */
import { openaiAnswer } from "../helpers/openaiAnswer.ts";
import { serveForTest } from "../helpers/httpServe.ts";
import { wyhash } from "../../src/runtime/hashing.ts";

export interface RecordedRequest {
  method: string;
  /** Path and query as received, e.g. "/v1/models?x=1". */
  url: string;
  path: string;
  headers: Record<string, string>;
  /** The exact body bytes. */
  bytes: Uint8Array;
  text: string;
  /** The body parsed as JSON, when it is. */
  json: any;
  receivedAt: number;
  /** When the answer's last byte was written (streaming: after [DONE]). */
  finishedAt: number | null;
}

export interface FakeUpstreamOptions {
  /** Default 0: a free port. */
  port?: number;
  model?: string;
  /** Words a cache block (default 1). */
  blockWords?: number;
  /** Delay between SSE chunks (default 20 ms). */
  chunkDelayMs?: number;
  /** The answer text for a request (default: a fixed sentence); streamed one word a chunk. */
  answer?: (prompt: string, body: any) => string;
}

export interface FakeUpstream {
  readonly url: string;
  readonly port: number;
  readonly requests: RecordedRequest[];
  /** The last request received. */
  last(): RecordedRequest;
  /** Answers every request with this status and body until `recover()`. */
  fail(status: number, body: string, headers?: Record<string, string>): void;
  /** Never answers (requests hang) until `recover()` or `stop()`. */
  hang(): void;
  /** Answers with `respond(request)` when it returns a Response or a promise of one (until `recover()`). */
  custom(respond: (request: RecordedRequest) => Response | Promise<Response> | undefined): void;
  recover(): void;
  stop(): Promise<void>;
}

export const DEFAULT_ANSWER = "The documents say the answer is forty-two.";

/** The prompt an OpenAI request stands for: chat message contents joined by newlines, or the completion prompt. */
export function promptOf(body: any): string {
  if (Array.isArray(body?.messages)) {
    return body.messages
      .map((m: any) => (typeof m?.content === "string" ? m.content : Array.isArray(m?.content) ? m.content.map((p: any) => (typeof p?.text === "string" ? p.text : "")).join("\n") : ""))
      .join("\n");
  }
  if (typeof body?.prompt === "string") return body.prompt;
  if (Array.isArray(body?.prompt)) return body.prompt.filter((p: unknown) => typeof p === "string").join("\n");
  return "";
}

export function words(text: string): string[] {
  return text.split(/\s+/).filter((w) => w !== "");
}

export async function startFakeUpstream(options: FakeUpstreamOptions = {}): Promise<FakeUpstream> {
  const model = options.model ?? "fake-model";
  const chunkDelayMs = options.chunkDelayMs ?? 20;
  const answerOf = options.answer ?? (() => DEFAULT_ANSWER);
  const requests: RecordedRequest[] = [];
  const blockWords = options.blockWords ?? 1;
  const cachedBlocks = new Set<bigint>();
  let mode: { kind: "ok" } | { kind: "fail"; status: number; body: string; headers: Record<string, string> } | { kind: "hang" } | { kind: "custom"; respond: (r: RecordedRequest) => Response | Promise<Response> | undefined } = { kind: "ok" };
  const hanging = new Set<() => void>();
  let counter = 0;

  /** Looks the prompt's blocks up (hash of a block chained with its predecessors'), then caches them. */
  const cachedTokens = (tokens: string[]): number => {
    let hash = 0n;
    let cached = 0;
    let hit = true;
    for (let start = 0; start + blockWords <= tokens.length; start += blockWords) {
      hash = wyhash(tokens.slice(start, start + blockWords).join(" "), hash);
      if (hit && cachedBlocks.has(hash)) cached += blockWords;
      else {
        hit = false;
        cachedBlocks.add(hash);
      }
    }
    return cached;
  };

  const generate = (record: RecordedRequest, chat: boolean): Response => {
    const body = record.json ?? {};
    const prompt = promptOf(body);
    const tokens = words(prompt);
    const cached = cachedTokens(tokens);
    const answer = answerOf(prompt, body);
    const answerWords = answer.split(/(?<= )/);
    const usage = { prompt_tokens: tokens.length, completion_tokens: answerWords.length, total_tokens: tokens.length + answerWords.length, prompt_tokens_details: { cached_tokens: cached } };
    // As vLLM: an X-Request-Id header wins over the body's request_id.
    const id = `${chat ? "chatcmpl" : "cmpl"}-${record.headers["x-request-id"] ?? body.request_id ?? body.rid ?? `fake${++counter}`}`;
    return openaiAnswer({
      id,
      model,
      chat,
      pieces: answerWords,
      usage,
      stream: body.stream === true,
      includeUsage: body.stream_options?.include_usage === true,
      chunkDelayMs,
      finished: () => (record.finishedAt = performance.now()),
    });
  };

  const server = serveForTest(async (request) => {
    const url = new URL(request.url);
    const bytes = new Uint8Array(await request.arrayBuffer());
    const text = new TextDecoder().decode(bytes);
    let json: any = undefined;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    const headers: Record<string, string> = {};
    request.headers.forEach((value, name) => (headers[name] = value));
    const record: RecordedRequest = { method: request.method, url: url.pathname + url.search, path: url.pathname, headers, bytes, text, json, receivedAt: performance.now(), finishedAt: null };
    requests.push(record);

    if (mode.kind === "hang") {
      await new Promise<void>((resolve) => hanging.add(resolve));
      return new Response("released", { status: 503 });
    }
    if (mode.kind === "fail") {
      record.finishedAt = performance.now();
      return new Response(mode.body, { status: mode.status, headers: mode.headers });
    }
    if (mode.kind === "custom") {
      const answer = await mode.respond(record);
      if (answer !== undefined) return answer;
    }
    if (request.method === "POST" && url.pathname === "/v1/chat/completions") return generate(record, true);
    if (request.method === "POST" && url.pathname === "/v1/completions") return generate(record, false);
    if (request.method === "GET" && url.pathname === "/v1/models") {
      return Response.json({ object: "list", data: [{ id: model, object: "model", created: 1_700_000_000, owned_by: "fake" }] });
    }
    return Response.json({ error: { message: `no route ${request.method} ${url.pathname}`, type: "not_found" } }, { status: 404 });
  }, { port: options.port, idleTimeoutS: 0 });

  const release = () => {
    for (const resolve of hanging) resolve();
    hanging.clear();
  };
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port,
    requests,
    last: () => {
      const r = requests[requests.length - 1];
      if (r === undefined) throw new Error("the fake upstream received no request");
      return r;
    },
    fail(status, body, headers = { "content-type": "application/json" }) {
      mode = { kind: "fail", status, body, headers };
    },
    hang() {
      mode = { kind: "hang" };
    },
    custom(respond) {
      mode = { kind: "custom", respond };
    },
    recover() {
      mode = { kind: "ok" };
      release();
    },
    async stop() {
      release();
      await server.stop(true);
    },
  };
}
