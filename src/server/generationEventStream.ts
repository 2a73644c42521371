/**
 * The text/event-stream answer of the generation routes (openaiRoutes.ts): `data: {chunk}` events
 * then `data: [DONE]`, keep-alive comments while nothing is written (sseKeepAlive.ts), and a failure
 * logged and ended with an error event in OpenAI's shape.
 */
import { DeadlineExceededError, GenerationFailedError, SchedulerClosedError } from "../engine/generationScheduler.ts";
import { IdleTicker, KEEP_ALIVE_EVENT } from "./sseKeepAlive.ts";

const encoder = new TextEncoder();

export interface EventStreamOptions {
  /** Told a failure that ended the stream early (it then ends with an error event and [DONE]). */
  log: (text: string) => void;
  /** Keep-alive comment after this long without a write (sseKeepAlive.ts). */
  keepAliveMs: number;
}

/**
 * A text/event-stream response fed by `run`; cancelling it (client gone) calls onCancel. While
 * nothing is written (queued, prefilling) a keep-alive comment goes out every keepAliveMs, so
 * neither Bun's idle timeout nor a proxy in between closes the connection. `fail(error)` logs a
 * failure and sends its error event (`run` then sends [DONE]); if `run` itself throws, the
 * failure is logged and the stream ends with an error event and [DONE].
 */
export function eventStream(
  run: (send: (data: unknown) => void, fail: (error: unknown) => void) => Promise<void>,
  onCancel: () => void,
  signal: AbortSignal,
  options: EventStreamOptions,
): Response {
  let closed = false;
  let keepAlive: IdleTicker | null = null;
  const stop = () => {
    closed = true;
    keepAlive?.stop();
  };
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      const write = (bytes: Uint8Array) => {
        if (closed) return;
        try {
          controller.enqueue(bytes);
        } catch {
          stop(); // cancelled meanwhile
        }
      };
      keepAlive = new IdleTicker(options.keepAliveMs, () => write(KEEP_ALIVE_EVENT));
      const send = (data: unknown) => {
        write(encoder.encode(`data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`));
        keepAlive!.wrote();
      };
      const fail = (error: unknown) => {
        // A client that went away cancelled the request: nothing failed.
        if (closed) return;
        options.log(`ctxr serve: a streamed answer failed: ${failureMessage(error)}\n`);
        send(streamErrorEvent(error));
      };
      void run(send, fail)
        .catch((error) => {
          fail(error);
          send("[DONE]");
        })
        .finally(() => {
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

/** The error event that ends a stream that failed (OpenAI's error shape; code: the HTTP status a whole answer would have had). */
function streamErrorEvent(error: unknown): { error: { message: string; type: string; code: number } } {
  if (error instanceof DeadlineExceededError) return { error: { message: error.message, type: "timeout_error", code: 504 } };
  if (error instanceof SchedulerClosedError) return { error: { message: error.message, type: "server_error", code: 503 } };
  return { error: { message: failureMessage(error), type: "server_error", code: 500 } };
}

/** What a failed generation answers: the message of the failure. */
function failureMessage(error: unknown): string {
  if (error instanceof GenerationFailedError || error instanceof SchedulerClosedError || error instanceof DeadlineExceededError) return error.message;
  return `generation failed: ${(error as Error).message ?? String(error)}`;
}
