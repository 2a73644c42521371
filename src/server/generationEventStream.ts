/**
 * The text/event-stream answers of the generation routes: keep-alive comments while nothing is
 * written (http/sseKeepAlive.ts), the client going away cancels the request. `eventStream` writes the
 * chat and completions shape (`data: {chunk}` events then `data: [DONE]`, a failure logged and
 * ended with an error event in OpenAI's shape); responses/responseEventStream.ts the Responses one.
 */
import { failureMessage, streamFailure } from "./generationFailure.ts";
import { IdleTicker, KEEP_ALIVE_EVENT } from "../http/sseKeepAlive.ts";

const encoder = new TextEncoder();

export interface EventStreamOptions {
  /** Told a failure that ended the stream early (it then ends with an error event and [DONE]). */
  log: (text: string) => void;
  /** Keep-alive comment after this long without a write (http/sseKeepAlive.ts). */
  keepAliveMs: number;
}

/**
 * A text/event-stream response whose events `run` writes whole (each ending with a blank line);
 * cancelling it (client gone) calls onCancel. While nothing is written (queued, prefilling) a
 * keep-alive comment goes out every keepAliveMs, so neither Bun's idle timeout nor a proxy in
 * between closes the connection. The stream closes when `run` settles (it must not throw);
 * `isOpen()` turns false once the client went away.
 */
export function sseResponse(run: (write: (event: string) => void, isOpen: () => boolean) => Promise<void>, onCancel: () => void, signal: AbortSignal, keepAliveMs: number): Response {
  let closed = false;
  let keepAlive: IdleTicker | null = null;
  const stop = () => {
    closed = true;
    keepAlive?.stop();
  };
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      const enqueue = (bytes: Uint8Array) => {
        if (closed) return;
        try {
          controller.enqueue(bytes);
        } catch {
          stop(); // cancelled meanwhile
        }
      };
      keepAlive = new IdleTicker(keepAliveMs, () => enqueue(KEEP_ALIVE_EVENT));
      const write = (event: string) => {
        enqueue(encoder.encode(event));
        keepAlive!.wrote();
      };
      void run(write, () => !closed).finally(() => {
        if (closed) return;
        stop();
        try {
          controller.close();
        } catch {
          // cancelled meanwhile
        }
      });
    },
    cancel() {
      stop();
      onCancel();
    },
  });
  signal.addEventListener("abort", () => {
    stop();
    onCancel();
  });
  return new Response(stream, { status: 200, headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", "X-Accel-Buffering": "no" } });
}

/**
 * The chat and completions stream fed by `run`. `fail(error)` logs a failure and sends its error
 * event (`run` then sends [DONE]); if `run` itself throws, the failure is logged and the stream
 * ends with an error event and [DONE]. A client that went away is not a failure.
 */
export function eventStream(
  run: (send: (data: unknown) => void, fail: (error: unknown) => void) => Promise<void>,
  onCancel: () => void,
  signal: AbortSignal,
  options: EventStreamOptions,
): Response {
  return sseResponse(
    async (write, isOpen) => {
      const send = (data: unknown) => write(`data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`);
      const fail = (error: unknown) => {
        if (!isOpen()) return;
        options.log(`ctxr serve: a streamed answer failed: ${failureMessage(error)}\n`);
        send({ error: streamFailure(error) });
      };
      try {
        await run(send, fail);
      } catch (error) {
        fail(error);
        send("[DONE]");
      }
    },
    onCancel,
    signal,
    options.keepAliveMs,
  );
}
