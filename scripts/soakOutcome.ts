/**
 * How scripts/bench-soak.ts reads one answer: an incremental parser of a
 * text/event-stream body into its `data:` payloads, what each payload says
 * (end marker, error event, first content, usage.ctxr.queue_ms), and the
 * outcome of a request from what was seen. Pure: no I/O.
 */

/** What became of one request. */
export type Outcome =
  /** A stream that ended with `data: [DONE]` and no error event, or a 200 JSON answer. */
  | "completed"
  /** A stream that ended (or a connection that reset) without [DONE], without our hang-up. */
  | "cut"
  /** The client hung up on purpose before the end. */
  | "hangup"
  /** A stream that carried an error event (`data: {"error": ...}`). */
  | "error_event"
  /** An HTTP status other than 200 (the tally keeps the status). */
  | "status"
  /** Still running when the benchmark's drain time ran out: aborted by the benchmark, not counted as cut. */
  | "unfinished";

/** Splits a text/event-stream body, fed chunk by chunk, into the payloads of its `data:` fields. */
export class SseParser {
  private buffer = "";

  /** The payloads of the events completed by this chunk (an event ends at a blank line). */
  push(text: string): string[] {
    this.buffer += text.replace(/\r\n?/g, "\n");
    const payloads: string[] = [];
    for (let end = this.buffer.indexOf("\n\n"); end >= 0; end = this.buffer.indexOf("\n\n")) {
      const event = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const data = event
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5));
      if (data.length > 0) payloads.push(data.join("\n"));
    }
    return payloads;
  }

  /** Whether an unfinished event is buffered (a stream cut mid-event). */
  get pending(): boolean {
    return this.buffer.trim() !== "";
  }
}

/** What one `data:` payload (or a whole JSON answer) says. */
export interface PayloadReading {
  done: boolean;
  error: boolean;
  /** Generated text in it (chat delta content or completion text, any choice); the role chunk has none. */
  hasContent: boolean;
  /** usage.ctxr.queue_ms when the payload carries it. */
  queueMs: number | null;
  /** The payload is not JSON (and not [DONE]). */
  unreadable: boolean;
}

export function readPayload(payload: string): PayloadReading {
  const reading: PayloadReading = { done: false, error: false, hasContent: false, queueMs: null, unreadable: false };
  if (payload.trim() === "[DONE]") return { ...reading, done: true };
  let value: any;
  try {
    value = JSON.parse(payload);
  } catch {
    return { ...reading, unreadable: true };
  }
  if (value === null || typeof value !== "object") return { ...reading, unreadable: true };
  if (value.error !== undefined && value.error !== null) reading.error = true;
  if (Array.isArray(value.choices)) {
    reading.hasContent = value.choices.some((choice: any) => {
      const text = choice?.delta?.content ?? choice?.message?.content ?? choice?.text;
      return typeof text === "string" && text !== "";
    });
  }
  const queueMs = value.usage?.ctxr?.queue_ms;
  if (typeof queueMs === "number" && Number.isFinite(queueMs)) reading.queueMs = queueMs;
  return reading;
}

/** What the client saw of a streamed answer with status 200. */
export interface StreamSeen {
  sawDone: boolean;
  errorEvents: number;
  /** How the body ended: its end, a failed read (reset, timeout) or our own abort. */
  end: "end" | "reset" | "aborted";
}

/**
 * An error event wins (the server said it failed); then [DONE]; then our own hang-up; anything else
 * ended early without saying why: cut.
 */
export function streamOutcome(seen: StreamSeen): Exclude<Outcome, "status" | "unfinished"> {
  if (seen.errorEvents > 0) return "error_event";
  if (seen.sawDone) return "completed";
  if (seen.end === "aborted") return "hangup";
  return "cut";
}

/**
 * A non-streamed answer: a status other than 200 is a status; a 200 whose JSON body was read whole is
 * completed (an error object in it is an error event); a body that broke off is cut.
 */
export function jsonOutcome(status: number, body: string | null): Exclude<Outcome, "hangup" | "unfinished"> {
  if (status !== 200) return "status";
  if (body === null) return "cut";
  const reading = readPayload(body);
  if (reading.unreadable) return "cut";
  return reading.error ? "error_event" : "completed";
}
