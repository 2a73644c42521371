/**
 * Sending one request to an upstream and relaying its answer.
 *
 * Request headers are the client's minus hop-by-hop headers (and those the
 * Connection header names), Host and Content-Length; the client's credentials
 * are dropped when they were meant for ctxr, and Authorization is replaced when
 * ctxr has a key for the upstream. The answer is relayed as it arrives: the
 * upstream's body stream is read chunk by chunk and each chunk is passed on at
 * once (never buffered), while a scanner looks for the usage report (the last
 * `usage` of an SSE stream, or of a JSON body) and a redactor keeps secrets out.
 * Both read the body decoded: where either is needed, the upstream is asked
 * for `identity` and fetch decodes whatever coding it answers in anyway.
 */
import type { UpstreamUsage } from "../accounting/tokenAccounts.ts";
import { errorBody } from "../http/errors.ts";
import { redactText, StreamRedactor } from "./redact.ts";
import { IdleTicker, SseBoundary } from "../http/sseKeepAlive.ts";
import { HiddenUsageFilter } from "./streamUsage.ts";
import { FirstTokenWatch } from "./firstTokenWatch.ts";
import { fetchWithDecompress } from "../runtime/httpClient.ts";

/** Hop-by-hop headers (RFC 9110 §7.6.1) and others a proxy must not pass on (the body is complete: no Expect). */
const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length", "expect"]);

export interface HeaderPolicy {
  /** Drop the client's Authorization and x-api-key (they authenticated the client to ctxr). */
  dropClientCredentials: boolean;
  /** Authorization to send instead (the upstream key, or URL credentials), else null. */
  authorization: string | null;
  /**
   * Replace Accept-Encoding ("identity" where the answer is scanned: for usage, or for secrets to
   * redact), else pass the client's, or "identity" when it sent none (fetch would otherwise ask for
   * gzip and the relayed bytes would be compressed).
   */
  acceptEncoding?: string;
  /** Content-Type when the client sent none. */
  defaultContentType?: string;
  /** Headers set whatever the client sent (the engine's request id). */
  override?: readonly [name: string, value: string][];
}

function connectionTokens(headers: Headers): Set<string> {
  const tokens = new Set<string>();
  for (const token of (headers.get("connection") ?? "").split(",")) if (token.trim() !== "") tokens.add(token.trim().toLowerCase());
  return tokens;
}

/** The headers to send upstream for a client request. */
export function upstreamRequestHeaders(client: Headers, policy: HeaderPolicy): Headers {
  const named = connectionTokens(client);
  const out = new Headers();
  client.forEach((value, name) => {
    if (HOP_BY_HOP.has(name) || named.has(name)) return;
    if ((name === "authorization" || name === "x-api-key") && policy.dropClientCredentials) return;
    out.append(name, value);
  });
  if (policy.authorization !== null) out.set("authorization", policy.authorization);
  if (policy.acceptEncoding !== undefined) out.set("accept-encoding", policy.acceptEncoding);
  else if (!out.has("accept-encoding")) out.set("accept-encoding", "identity");
  if (policy.defaultContentType !== undefined && !out.has("content-type")) out.set("content-type", policy.defaultContentType);
  for (const [name, value] of policy.override ?? []) out.set(name, value);
  return out;
}

/**
 * The upstream's response headers to relay: hop-by-hop ones (Content-Length
 * among them) removed, Content-Encoding too when fetch decoded the body,
 * secrets in values redacted, headers whose name holds a secret dropped.
 */
export function relayedResponseHeaders(upstream: Headers, options: { decompressed: boolean; secrets: readonly string[] }): Headers {
  const named = connectionTokens(upstream);
  const out = new Headers();
  upstream.forEach((value, name) => {
    if (HOP_BY_HOP.has(name) || named.has(name)) return;
    if (options.decompressed && name === "content-encoding") return;
    if (redactText(name, options.secrets) !== name) return;
    out.append(name, redactText(value, options.secrets));
  });
  return out;
}

export type SendOutcome =
  | { ok: true; response: Response }
  | { ok: false; failure: "connect" | "timeout" | "aborted"; message: string };

export interface SendOptions {
  method: string;
  headers: Headers;
  body: Uint8Array | string | null;
  /** true: fetch decodes the body (see answerDecoding.ts); false: the bytes as the upstream encoded them. */
  decompress: boolean;
  /** Time allowed until the response headers arrive. */
  timeoutMs: number;
  /** The client's request signal (aborts when the client goes away). */
  clientSignal?: AbortSignal;
}

/** fetch with a timeout on the response headers; failures classified, never thrown. */
export async function sendToUpstream(url: string, options: SendOptions): Promise<SendOutcome> {
  const timeout = new AbortController();
  const timer = setTimeout(() => timeout.abort(), options.timeoutMs);
  const signal = options.clientSignal === undefined ? timeout.signal : AbortSignal.any([timeout.signal, options.clientSignal]);
  try {
    const response = await fetchWithDecompress(url, { method: options.method, headers: options.headers, body: options.body, signal, redirect: "manual" }, options.decompress);
    return { ok: true, response };
  } catch (error) {
    if (timeout.signal.aborted) return { ok: false, failure: "timeout", message: `no answer within ${options.timeoutMs} ms` };
    if (options.clientSignal?.aborted) return { ok: false, failure: "aborted", message: "the client went away" };
    const code = (error as { code?: unknown }).code;
    return { ok: false, failure: "connect", message: typeof code === "string" ? code : error instanceof Error ? error.message : String(error) };
  } finally {
    clearTimeout(timer);
  }
}

export type UsageFormat = "sse" | "json" | null;

export type Usage = UpstreamUsage;

/** Largest non-streamed body (or SSE line) kept for finding the usage report. */
const MAX_SCANNED_CHARS = 16 * 1024 * 1024;

/** Finds the usage report in an answer as it streams by. */
export class UsageScanner {
  private readonly decoder = new TextDecoder();
  private text = "";
  private usage: unknown = undefined;
  private overflow = false;

  constructor(private readonly format: "sse" | "json") {}

  push(chunk: Uint8Array): void {
    if (this.overflow) return;
    this.text += this.decoder.decode(chunk, { stream: true });
    if (this.format === "json") {
      if (this.text.length > MAX_SCANNED_CHARS) this.drop();
      return;
    }
    const end = this.text.lastIndexOf("\n");
    if (end < 0) {
      if (this.text.length > MAX_SCANNED_CHARS) this.drop();
      return;
    }
    const complete = this.text.slice(0, end);
    this.text = this.text.slice(end + 1);
    if (complete.includes('"usage"')) this.scanLines(complete);
  }

  /** The last usage report seen (after the stream ended). */
  finish(): Usage | null {
    if (!this.overflow) {
      this.text += this.decoder.decode();
      if (this.format === "json") this.usage = parseUsageOf(this.text) ?? this.usage;
      else if (this.text.includes('"usage"')) this.scanLines(this.text);
    }
    this.text = "";
    const usage = this.usage as
      | { prompt_tokens?: unknown; completion_tokens?: unknown; prompt_tokens_details?: { cached_tokens?: unknown } | null; ctxr?: { prompt_tokens_chunk_reused?: unknown; prompt_tokens_recomputed?: unknown } | null }
      | undefined;
    if (usage === undefined || usage === null || typeof usage !== "object") return null;
    const count = (value: unknown) => (typeof value === "number" && Number.isFinite(value) && value >= 0 ? Math.floor(value) : null);
    // A ctxr engine also tells the chunks it reused and recomputed (usage.ctxr).
    const ctxr = usage.ctxr !== null && typeof usage.ctxr === "object" ? usage.ctxr : null;
    return {
      promptTokens: count(usage.prompt_tokens),
      completionTokens: count(usage.completion_tokens),
      cachedTokens: count(usage.prompt_tokens_details?.cached_tokens),
      chunkReusedTokens: count(ctxr?.prompt_tokens_chunk_reused),
      recomputedTokens: count(ctxr?.prompt_tokens_recomputed),
    };
  }

  private scanLines(text: string): void {
    for (const line of text.split("\n")) {
      if (!line.startsWith("data:") || !line.includes('"usage"')) continue;
      const usage = parseUsageOf(line.slice(5));
      if (usage !== undefined) this.usage = usage;
    }
  }

  private drop(): void {
    this.overflow = true;
    this.text = "";
  }
}

function parseUsageOf(json: string): unknown {
  try {
    const value = JSON.parse(json) as { usage?: unknown } | null;
    return value !== null && typeof value === "object" && value.usage !== null && typeof value.usage === "object" ? value.usage : undefined;
  } catch {
    return undefined;
  }
}

export interface RelayOptions {
  /** Scan for usage in this format (null: do not scan). */
  scan: UsageFormat;
  /** Secrets to redact from the body (empty: bytes pass untouched). */
  secrets: readonly string[];
  /** Called once, when the body ended, failed or the client went away. */
  onDone(outcome: { usage: Usage | null; error: unknown }): void;
  /**
   * A client that takes nothing for this long while a chunk waits for it is cut off (the upstream
   * answer cancelled): an answer nobody reads holds its connection and buffers (default: never).
   */
  stallMs?: number | null;
  /**
   * The answer is a server-sent event stream: while the upstream sends nothing (queued, prefilling,
   * paused) a keep-alive comment goes to the client every `keepAliveMs` (null: never), and an
   * upstream body that breaks off ends the client's stream with an error event and [DONE] instead
   * of a cut connection.
   */
  sse?: { keepAliveMs: number | null } | null;
  /** Take out the usage the proxy asked for and the client did not (streamUsage.ts; an event stream, decoded). */
  hideUsage?: boolean;
  /** Called once, when the first event carrying a token goes by (an event stream; firstTokenWatch.ts). */
  onFirstToken?: () => void;
}

const encoder = new TextEncoder();

/** The end of a relayed event stream whose upstream broke off: the open event closed, an error event, [DONE]. */
function brokenStreamEnding(boundary: SseBoundary, error: unknown): Uint8Array {
  const message = `the upstream's answer broke off: ${error instanceof Error ? error.message : String(error)}`;
  const event = JSON.stringify(errorBody(message, "", 502));
  return encoder.encode(`${boundary.closer()}data: ${event}\n\ndata: [DONE]\n\n`);
}

/**
 * The upstream body as a stream that hands each chunk on as soon as it
 * arrives. Cancelling it (the client went away) cancels the upstream body.
 */
export function relayBody(body: ReadableStream<Uint8Array> | null, options: RelayOptions): ReadableStream<Uint8Array> | null {
  let done = false;
  const finish = (usage: Usage | null, error: unknown) => {
    if (done) return;
    done = true;
    options.onDone({ usage, error });
  };
  if (body === null) {
    finish(null, null);
    return null;
  }
  const reader = body.getReader();
  const scanner = options.scan === null ? null : new UsageScanner(options.scan);
  const redactor = options.secrets.length === 0 ? null : new StreamRedactor(options.secrets);
  const hider = options.hideUsage === true ? { filter: new HiddenUsageFilter(), decoder: new TextDecoder() } : null;
  const unhidden = (bytes: Uint8Array) => (hider === null ? bytes : encoder.encode(hider.filter.push(hider.decoder.decode(bytes, { stream: true }))));
  const hiddenTail = () => (hider === null ? new Uint8Array(0) : encoder.encode(hider.filter.push(hider.decoder.decode()) + hider.filter.flush()));
  const cleaned = (bytes: Uint8Array) => (redactor === null ? bytes : redactor.push(bytes));
  const tailBytes = () => {
    const hidden = cleaned(hiddenTail());
    const rest = redactor?.flush();
    if (rest === undefined || rest.length === 0) return hidden;
    const out = new Uint8Array(hidden.length + rest.length);
    out.set(hidden);
    out.set(rest, hidden.length);
    return out;
  };
  const firstToken = options.onFirstToken === undefined ? null : { watch: new FirstTokenWatch(), seen: options.onFirstToken };
  const stallMs = options.stallMs ?? null;
  let stall: ReturnType<typeof setTimeout> | null = null;
  const stopWatching = () => {
    if (stall !== null) clearTimeout(stall);
    stall = null;
  };
  const sse = options.sse ?? null;
  const boundary = sse === null ? null : new SseBoundary();
  let keepAlive: IdleTicker | null = null;
  const stopKeepAlive = () => keepAlive?.stop();
  const handOn = (controller: ReadableStreamDefaultController<Uint8Array>, bytes: Uint8Array) => {
    controller.enqueue(bytes);
    boundary?.observe(bytes);
    keepAlive?.wrote();
  };
  return new ReadableStream<Uint8Array>({
    start(controller) {
      if (sse === null || sse.keepAliveMs === null) return;
      keepAlive = new IdleTicker(sse.keepAliveMs, () => {
        // Only when the client took everything so far (a client that reads nothing is not kept), and at a line start.
        const comment = boundary!.keepAlive();
        if (comment === null || (controller.desiredSize ?? 0) <= 0) return;
        controller.enqueue(comment);
        boundary!.observe(comment);
      });
    },
    async pull(controller) {
      stopWatching();
      // Loop until something was handed on: a pull that enqueues nothing is not called again.
      for (;;) {
        let read: Awaited<ReturnType<typeof reader.read>>;
        try {
          read = await reader.read();
        } catch (error) {
          stopKeepAlive();
          finish(scanner?.finish() ?? null, error);
          if (boundary === null) {
            controller.error(error);
            return;
          }
          const tail = tailBytes();
          if (tail.length > 0) handOn(controller, tail);
          controller.enqueue(brokenStreamEnding(boundary, error));
          controller.close();
          return;
        }
        if (read.done) {
          stopKeepAlive();
          const tail = tailBytes();
          if (tail.length > 0) controller.enqueue(tail);
          finish(scanner?.finish() ?? null, null);
          controller.close();
          return;
        }
        if (firstToken?.watch.push(read.value)) firstToken.seen();
        scanner?.push(read.value);
        const out = cleaned(unhidden(read.value));
        if (out.length > 0) {
          handOn(controller, out);
          if (stallMs !== null) {
            stall = setTimeout(() => {
              stopKeepAlive();
              const error = new Error(`the client read nothing for ${stallMs / 1000} s; answer cut off`);
              finish(null, error);
              controller.error(error);
              reader.cancel(error).catch(() => {});
            }, stallMs);
          }
          return;
        }
      }
    },
    cancel(reason) {
      stopWatching();
      stopKeepAlive();
      finish(null, null);
      return reader.cancel(reason);
    },
  });
}
