/**
 * A Responses API event stream: server-sent events each with an `event: TYPE` line and a
 * `data: {event}` line, numbered by sequence_number from 0, fed by `run`. The client going away
 * (the request aborted or the stream cancelled) calls onCancel.
 */
const encoder = new TextEncoder();

export type SendEvent = (event: { type: string } & Record<string, unknown>) => void;

export function responseEventStream(run: (send: SendEvent) => Promise<void>, onCancel: () => void, signal: AbortSignal): Response {
  let closed = false;
  let sequence = 0;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      const send: SendEvent = (event) => {
        if (closed) return;
        const numbered = { ...event, sequence_number: sequence++ };
        controller.enqueue(encoder.encode(`event: ${event.type}\ndata: ${JSON.stringify(numbered)}\n\n`));
      };
      void run(send).finally(() => {
        if (closed) return;
        closed = true;
        try {
          controller.close();
        } catch {
          // cancelled meanwhile
        }
      });
    },
    cancel() {
      closed = true;
      onCancel();
    },
  });
  signal.addEventListener("abort", () => {
    closed = true;
    onCancel();
  });
  return new Response(stream, { status: 200, headers: { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache", "X-Accel-Buffering": "no" } });
}
