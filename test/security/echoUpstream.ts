/**
 * An upstream for leak tests: Bun.serve on 127.0.0.1 port 0 that echoes every
 * request header it receives, in the answer body and as `x-echo-<name>`
 * response headers, compressed in the coding the request names.
 *
 * The body is OpenAI-shaped: a `chat.completion` whose message content is
 * `{"method","path","headers"}` as JSON, or, for a streamed request (JSON body
 * with `"stream": true`, or `?stream=1`), SSE `chat.completion.chunk` events
 * with one "name: value" line of content each, a usage chunk and `[DONE]`;
 * each event is compressed and flushed on its own, `delayMs` apart.
 *
 * Request headers that steer it (ctxr forwards them like any other):
 *  - `x-echo-coding`: identity (default), gzip, deflate, br, zstd, a list of
 *    those ("gzip, br": applied in that order; not streamed), or any other name
 *    (the body then goes out as is, labelled with it);
 *  - `x-echo-ignore-accept-encoding: 1`: compress even when the request's
 *    Accept-Encoding does not list the coding (by default it answers identity then).
 */
import type { Server } from "bun";
import zlib from "node:zlib";

export interface EchoedRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
}

export interface EchoUpstream {
  readonly url: string;
  readonly port: number;
  readonly requests: EchoedRequest[];
  stop(): Promise<void>;
}

/** Codings the echo upstream (and the test's decoder) handle: zstd where node:zlib has it. */
export const CODINGS: string[] = ["identity", "gzip", "deflate", "br", ...(typeof zlib.createZstdCompress === "function" ? ["zstd"] : [])];

const encoder = new TextEncoder();

/**
 * `events` as a stream in `coding`, each event compressed and flushed on its
 * own (so it can be decoded before the next arrives), `delayMs` apart.
 */
function compressedEvents(events: string[], coding: string, delayMs: number): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    start(controller) {
      const enqueue = (bytes: Uint8Array) => {
        try {
          controller.enqueue(bytes);
        } catch {
          // The reader went away.
        }
      };
      const compressor =
        coding === "gzip"
          ? zlib.createGzip()
          : coding === "deflate"
            ? zlib.createDeflate()
            : coding === "br"
              ? zlib.createBrotliCompress()
              : coding === "zstd"
                ? zlib.createZstdCompress()
                : null;
      const flushKind = coding === "br" ? zlib.constants.BROTLI_OPERATION_FLUSH : coding === "zstd" ? zlib.constants.ZSTD_e_flush : zlib.constants.Z_SYNC_FLUSH;
      // Output comes as 'data' events, some after the flush callback: passed on whenever they come.
      compressor?.on("data", (data: Buffer) => enqueue(new Uint8Array(data)));
      compressor?.on("end", () => controller.close());
      void (async () => {
        for (const [i, event] of events.entries()) {
          if (i > 0 && delayMs > 0) await Bun.sleep(delayMs);
          if (compressor === null) enqueue(encoder.encode(event));
          else {
            compressor.write(event);
            await new Promise<void>((resolve) => compressor.flush(flushKind, () => resolve()));
          }
        }
        if (compressor === null) controller.close();
        else compressor.end();
      })();
    },
  });
}

/** The whole body in `codings` (applied in order); unknown names leave the bytes as they are. */
function compressWhole(text: string, codings: string[]): Uint8Array {
  let bytes: Uint8Array = encoder.encode(text);
  for (const coding of codings) {
    if (coding === "gzip") bytes = zlib.gzipSync(bytes);
    else if (coding === "deflate") bytes = zlib.deflateSync(bytes);
    else if (coding === "br") bytes = zlib.brotliCompressSync(bytes);
    else if (coding === "zstd") bytes = zlib.zstdCompressSync(bytes);
  }
  return bytes;
}

export async function startEchoUpstream(options: { delayMs?: number } = {}): Promise<EchoUpstream> {
  const requests: EchoedRequest[] = [];
  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    development: false,
    async fetch(request) {
      const url = new URL(request.url);
      const text = await request.text();
      let body: any = undefined;
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
      const headers: Record<string, string> = {};
      request.headers.forEach((value, name) => (headers[name] = value));
      const echoed: EchoedRequest = { method: request.method, path: url.pathname, headers };
      requests.push(echoed);

      const asked = (headers["x-echo-coding"] ?? "identity").toLowerCase();
      const codings = asked.split(",").map((c) => c.trim()).filter((c) => c !== "" && c !== "identity");
      const accepted = (headers["accept-encoding"] ?? "").toLowerCase();
      const honoured = headers["x-echo-ignore-accept-encoding"] !== "1";
      const coding = codings.length === 0 || (honoured && !codings.every((c) => accepted.includes(c))) ? "identity" : asked;
      const answerHeaders = new Headers();
      for (const [name, value] of Object.entries(headers)) answerHeaders.set(`x-echo-${name}`, value);
      if (coding !== "identity") answerHeaders.set("content-encoding", coding);

      const streamed = body?.stream === true || url.searchParams.get("stream") === "1";
      const created = 1_700_000_000;
      if (!streamed || codings.length > 1 || (coding !== "identity" && !CODINGS.includes(coding))) {
        answerHeaders.set("content-type", "application/json");
        const answer = {
          id: "chatcmpl-echo",
          object: "chat.completion",
          created,
          model: "echo",
          choices: [{ index: 0, message: { role: "assistant", content: JSON.stringify(echoed) }, finish_reason: "stop" }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2, prompt_tokens_details: { cached_tokens: 0 } },
        };
        return new Response(compressWhole(JSON.stringify(answer), coding === "identity" ? [] : codings), { headers: answerHeaders });
      }

      answerHeaders.set("content-type", "text/event-stream");
      const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
        `data: ${JSON.stringify({ id: "chatcmpl-echo", object: "chat.completion.chunk", created, model: "echo", choices, ...extra })}\n\n`;
      const events = [
        chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]),
        ...Object.entries(headers).map(([name, value]) => chunk([{ index: 0, delta: { content: `${name}: ${value}\n` }, finish_reason: null }])),
        chunk([{ index: 0, delta: {}, finish_reason: "stop" }]),
        chunk([], { usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2, prompt_tokens_details: { cached_tokens: 0 } } }),
        "data: [DONE]\n\n",
      ];
      const stream = compressedEvents(events, coding, options.delayMs ?? 0);
      return new Response(stream, { headers: answerHeaders });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port!,
    requests,
    stop: () => server.stop(true),
  };
}
