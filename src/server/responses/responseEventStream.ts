/**
 * A Responses API event stream: server-sent events each with an `event: TYPE` line and a
 * `data: {event}` line, numbered by sequence_number from 0, fed by `run`; keep-alive comments
 * while nothing is written, and the client going away (the request aborted or the stream
 * cancelled) calls onCancel (generationEventStream.ts).
 */
import { sseResponse } from "../generationEventStream.ts";

export type SendEvent = (event: { type: string } & Record<string, unknown>) => void;

export function responseEventStream(run: (send: SendEvent, isOpen: () => boolean) => Promise<void>, onCancel: () => void, signal: AbortSignal, keepAliveMs: number): Response {
  return sseResponse(
    (write, isOpen) => {
      let sequence = 0;
      return run((event) => write(`event: ${event.type}\ndata: ${JSON.stringify({ ...event, sequence_number: sequence++ })}\n\n`), isOpen);
    },
    onCancel,
    signal,
    keepAliveMs,
  );
}
