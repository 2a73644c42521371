/**
 * Helpers for the client-input tests: raw HTTP/1.1 over node:net (for bytes
 * fetch will not send: odd chunked encodings, duplicate Content-Length), an
 * upstream that answers every request 200 (so any 5xx a test sees is ctxr's
 * own), and checks on answers and logs.
 */
import type { Server } from "bun";
import net from "node:net";

export interface RawAnswer {
  /** The status of the first answer, or null when the connection closed without one. */
  status: number | null;
  headers: Record<string, string>;
  body: string;
  /** Everything received. */
  raw: string;
}

/**
 * Writes `parts` one after another to 127.0.0.1:port (stops writing once the
 * server closes) and reads the answer: done when a whole answer with a
 * Content-Length arrived, the server closed, or after `timeoutMs`. With `end`,
 * half-closes once everything is written (Bun then drops a request still being
 * answered: only for requests that end that way on purpose).
 */
export function rawHttp(port: number, parts: (string | Uint8Array)[], options: { timeoutMs?: number; end?: boolean } = {}): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    const received: Buffer[] = [];
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(parseAnswer(Buffer.concat(received).toString("latin1")));
    };
    const timer = setTimeout(finish, options.timeoutMs ?? 10_000);
    socket.on("data", (data: Buffer) => {
      received.push(data);
      const raw = Buffer.concat(received).toString("latin1");
      if (!raw.includes("\r\n\r\n")) return;
      const answer = parseAnswer(raw);
      const length = answer.headers["content-length"];
      if (length !== undefined && Buffer.byteLength(answer.body, "latin1") >= Number(length)) finish();
    });
    socket.on("close", finish);
    socket.on("error", () => {}); // EPIPE / ECONNRESET once the server answered early and closed
    socket.on("connect", async () => {
      for (const part of parts) {
        if (socket.destroyed || socket.writableEnded) return;
        const flushed = await new Promise<boolean>((done) => socket.write(part, (error) => done(!error)));
        if (!flushed) return;
      }
      if (options.end === true && !socket.destroyed) socket.end();
    });
  });
}

function parseAnswer(raw: string): RawAnswer {
  const headEnd = raw.indexOf("\r\n\r\n");
  const head = headEnd < 0 ? raw : raw.slice(0, headEnd);
  const match = /^HTTP\/1\.1 (\d{3})/.exec(head);
  const headers: Record<string, string> = {};
  for (const line of head.split("\r\n").slice(1)) {
    const colon = line.indexOf(":");
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = headEnd < 0 ? "" : raw.slice(headEnd + 4);
  const length = headers["content-length"];
  if (length !== undefined) body = body.slice(0, Number(length));
  return { status: match ? Number(match[1]) : null, headers, body, raw };
}

/** A request head (CRLF line ends, no final blank line). */
export function head(path: string, headers: string[]): string {
  return [`POST ${path} HTTP/1.1`, "Host: 127.0.0.1", "Content-Type: application/json", ...headers].join("\r\n");
}

/** A chunked body of `total` bytes of JSON-ish filler in chunks of `chunk` bytes, with the final chunk. */
export function chunkedParts(total: number, chunk = 1024 * 1024): (string | Uint8Array)[] {
  const parts: (string | Uint8Array)[] = [];
  const filler = new Uint8Array(chunk).fill(0x20);
  for (let sent = 0; sent < total; sent += chunk) {
    const size = Math.min(chunk, total - sent);
    parts.push(`${size.toString(16)}\r\n`, size === chunk ? filler : filler.subarray(0, size), "\r\n");
  }
  parts.push("0\r\n\r\n");
  return parts;
}

/** `{"error": {"message", "field"}}` with a non-empty message. */
export function isErrorBody(value: unknown): boolean {
  const error = (value as { error?: { message?: unknown; field?: unknown } } | null)?.error;
  return typeof error?.message === "string" && error.message !== "" && typeof error.field === "string";
}

export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Log lines that report an internal error. */
export function internalErrors(logs: readonly string[]): string[] {
  return logs.filter((line) => /internal error/i.test(line));
}

export interface OkUpstream {
  readonly url: string;
  /** Requests received. */
  received: number;
  stop(): Promise<void>;
}

/** An OpenAI-ish upstream that reads each body and answers 200 with a small completion, whatever it got. */
export function startOkUpstream(): OkUpstream {
  const state = { received: 0 };
  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    development: false,
    async fetch(request) {
      await request.arrayBuffer().catch(() => undefined);
      state.received++;
      return Response.json({ id: "cmpl-1", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, text: "ok", finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
    },
  }) as Server<undefined>;
  return {
    url: `http://127.0.0.1:${server.port}`,
    get received() {
      return state.received;
    },
    stop: () => server.stop(true),
  };
}
