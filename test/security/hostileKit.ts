/**
 * Hostile-client kit, shared by test/security/stateBudgets.test.ts and
 * scripts/bench-hostile.ts: `ctxr serve` as a child process with its peak RSS
 * (VmHWM of the bun child, from /proc/PID/status), traffic that grows the
 * state clients control (client-chosen block ids sent to /v1/reorder and
 * /v1/dedup, conversation histories through the proxy), a minimal upstream
 * that keeps nothing, and a tally of answer statuses.
 *
 * Everything talks to 127.0.0.1; every loop is bounded by a byte total.
 */
import { readFileSync } from "node:fs";
import { spawnServer, type Client, type SpawnedServer } from "../server/serverKit.ts";
import { serveForTest } from "../helpers/httpServe.ts";

export const KiB = 1024;
export const MiB = 1024 * KiB;
export const GiB = 1024 * MiB;

/** A kB field of /proc/PID/status (VmHWM, VmRSS), in bytes; null once the process is gone. */
export function procStatusBytes(pid: number, field: "VmHWM" | "VmRSS"): number | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return null;
  }
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text);
  return match ? Number(match[1]) * KiB : null;
}

export const mib = (bytes: number | null) => (bytes === null ? "n/a" : `${(bytes / MiB).toFixed(0)} MiB`);

/** One probe's figures in scripts/bench-hostile.ts's table (and its JSON line). */
export interface HostileProbeResult {
  probe: string;
  traffic: string;
  start_rss_bytes: number;
  peak_rss_bytes: number;
  rss_after_reset_bytes: number | null;
  wall_ms: number;
  requests: number;
  statuses: Record<string, number>;
  five_xx: number;
  p50_ms_before: number | null;
  p50_ms_during: number | null;
  notes: string;
}

export interface Ctxr extends SpawnedServer {
  readonly pid: number;
  /** Peak resident set so far (VmHWM), bytes. */
  peakRss(): number;
  /** Resident set now (VmRSS), bytes. */
  rss(): number;
  stats(): Promise<any>;
  /** SIGTERM, then SIGKILL after 5 s. */
  stop(): Promise<void>;
}

/** `ctxr serve --in-memory --port 0 ...args` in a child process. */
export async function startCtxr(args: string[] = []): Promise<Ctxr> {
  const server = await spawnServer(["--in-memory", ...args]);
  const pid = server.process.pid;
  const read = (field: "VmHWM" | "VmRSS") => {
    const value = procStatusBytes(pid, field);
    if (value === null) throw new Error(`ctxr serve (pid ${pid}) is gone; stderr: ${server.stderr().slice(-2000)}`);
    return value;
  };
  return {
    ...server,
    pid,
    peakRss: () => read("VmHWM"),
    rss: () => read("VmRSS"),
    async stats() {
      const answer = await server.get("/v1/stats");
      if (answer.status !== 200) throw new Error(`/v1/stats answered ${answer.status}: ${answer.text.slice(0, 500)}`);
      return answer.body;
    },
    async stop() {
      server.kill("SIGTERM");
      const killer = setTimeout(() => server.kill("SIGKILL"), 5000);
      await server.exited;
      clearTimeout(killer);
    },
  };
}

/** Counts of answer statuses ("200": 12, ...; "error" for a failed fetch). */
export class StatusTally {
  readonly counts: Record<string, number> = {};
  requests = 0;
  /** The first few non-2xx answers (status and start of the body), for messages. */
  readonly samples: string[] = [];

  add(status: number | "error", text = ""): void {
    this.requests++;
    this.counts[String(status)] = (this.counts[String(status)] ?? 0) + 1;
    if ((status === "error" || status < 200 || status > 299) && this.samples.length < 5) this.samples.push(`${status} ${text.slice(0, 300)}`);
  }

  get fiveHundreds(): number {
    return Object.entries(this.counts).reduce((sum, [status, count]) => sum + (status === "error" || status.startsWith("5") ? count : 0), 0);
  }

  get non2xx(): number {
    return Object.entries(this.counts).reduce((sum, [status, count]) => sum + (status.startsWith("2") ? 0 : count), 0);
  }

  merge(other: StatusTally): void {
    for (const [status, count] of Object.entries(other.counts)) this.counts[status] = (this.counts[status] ?? 0) + count;
    this.requests += other.requests;
    for (const sample of other.samples) if (this.samples.length < 5) this.samples.push(sample);
  }
}

/**
 * Distinct block ids of exactly `chars` characters: a random-per-run stem
 * padded to length, ending with a counter (base 36), so no two are equal and
 * none equals an id of another run.
 */
export function idMaker(chars: number, seed = Math.floor(Math.random() * 2 ** 31)): () => string {
  const stem = `id${seed.toString(36)}-`;
  const pad = "x".repeat(Math.max(0, chars));
  let next = 0;
  return () => {
    const counter = (next++).toString(36);
    const head = stem + counter + "-";
    return head.length >= chars ? head : head + pad.slice(0, chars - head.length);
  };
}

/** POSTs a prebuilt JSON text; never throws (a failed fetch tallies "error"). */
async function postText(url: string, path: string, body: string, tally: StatusTally): Promise<{ status: number | "error"; text: string }> {
  try {
    const response = await fetch(url + path, { method: "POST", body, headers: { "content-type": "application/json" } });
    const text = await response.text();
    tally.add(response.status, text);
    return { status: response.status, text };
  } catch (error) {
    tally.add("error", String(error));
    return { status: "error", text: String(error) };
  }
}

/** Runs `count` jobs with at most `concurrency` at a time. */
async function pool(count: number, concurrency: number, job: (index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await job(next++);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, count)) }, worker));
}

export interface IdTraffic {
  /** Bytes of ids to send in all (the characters of the ids; each is ASCII). */
  totalBytes: number;
  /** Characters of an id (default 1,000; the server takes at most 1,024). */
  idChars?: number;
  /** Ids a context or dedup turn (default 1,024, the server's --max-blocks). */
  blocks?: number;
  /** Reorder: contexts a request (default 4: 4 MB bodies, under the default 8 MiB --max-body-bytes). */
  contexts?: number;
  /** Requests in flight (default 2). */
  concurrency?: number;
  /** Dedup: turns go round-robin to this many conversations (default 8). Reorder: with it, each request names a conversation too. */
  conversations?: number;
  /** Called after each answer (progress, RSS sampling). */
  onAnswer?: () => void;
}

export interface TrafficResult {
  tally: StatusTally;
  bytes: number;
  ms: number;
}

/** /v1/reorder requests of distinct client-chosen ids (the index grows by every one). */
export async function sendReorderIds(url: string, options: IdTraffic): Promise<TrafficResult> {
  const idChars = options.idChars ?? 1000;
  const blocks = options.blocks ?? 1024;
  const contexts = options.contexts ?? 4;
  const perRequest = idChars * blocks * contexts;
  const requests = Math.max(1, Math.ceil(options.totalBytes / perRequest));
  const nextId = idMaker(idChars);
  const tally = new StatusTally();
  const started = performance.now();
  await pool(requests, options.concurrency ?? 2, async (i) => {
    const body: Record<string, unknown> = { contexts: Array.from({ length: contexts }, () => Array.from({ length: blocks }, nextId)) };
    if (options.conversations) body.conversation_id = `reorder-conversation-${i % options.conversations}`;
    await postText(url, "/v1/reorder", JSON.stringify(body), tally);
    options.onAnswer?.();
  });
  return { tally, bytes: requests * perRequest, ms: performance.now() - started };
}

/** /v1/dedup turns of distinct client-chosen ids, round-robin over `conversations` conversations. */
export async function sendDedupIds(url: string, options: IdTraffic): Promise<TrafficResult> {
  const idChars = options.idChars ?? 1000;
  const blocks = options.blocks ?? 1024;
  const conversations = options.conversations ?? 8;
  const perRequest = idChars * blocks;
  const requests = Math.max(1, Math.ceil(options.totalBytes / perRequest));
  const nextId = idMaker(idChars);
  const tally = new StatusTally();
  const started = performance.now();
  await pool(requests, options.concurrency ?? 2, async (i) => {
    const body = { conversation_id: `dedup-conversation-${i % conversations}`, blocks: Array.from({ length: blocks }, nextId) };
    await postText(url, "/v1/dedup", JSON.stringify(body), tally);
    options.onAnswer?.();
  });
  return { tally, bytes: requests * perRequest, ms: performance.now() - started };
}

export interface HistoryTraffic {
  /** Bytes of message content to send in all. */
  totalBytes: number;
  /** Bytes of one request's user message (default 7 MB, under the default 8 MiB --max-body-bytes). */
  messageBytes?: number;
  /** Requests in flight (default 2). */
  concurrency?: number;
  /** Documents (XML-tagged, 1 KB each) at the head of each message, so the proxy reorders and indexes too (default 8). */
  documents?: number;
  /** Extra "ctxr" options of each request (e.g. {reorder: false}). */
  ctxr?: Record<string, unknown>;
  onAnswer?: () => void;
}

/** A chat message of about `bytes` bytes: `documents` distinct <document> elements, then filler words. */
export function bigMessage(bytes: number, documents: number, tag: string): string {
  const parts: string[] = [];
  for (let d = 0; d < documents; d++) parts.push(`<document id="${tag}-doc-${d}">\n${`${tag} document ${d} says something. `.repeat(30)}\n</document>`);
  parts.push("Question about the documents above. ");
  const head = parts.join("\n");
  const filler = "lorem ipsum dolor sit amet ";
  return head + filler.repeat(Math.max(0, Math.ceil((bytes - head.length) / filler.length)));
}

/**
 * Proxy chat requests, each a new conversation (ctxr.conversation_id) with one
 * big user message: the proxy remembers every conversation's forwarded
 * messages, so without a budget the histories grow by every request.
 */
export async function sendHistories(url: string, options: HistoryTraffic): Promise<TrafficResult> {
  const messageBytes = options.messageBytes ?? 7_000_000;
  const requests = Math.max(1, Math.ceil(options.totalBytes / messageBytes));
  const run = Math.floor(Math.random() * 2 ** 31).toString(36);
  // One filler string shared by all requests (the server parses each body afresh, so its copies are distinct).
  const filler = bigMessage(messageBytes, 0, run);
  const documents = options.documents ?? 8;
  const tally = new StatusTally();
  const started = performance.now();
  await pool(requests, options.concurrency ?? 2, async (i) => {
    const content = bigMessage(0, documents, `${run}-${i}`) + filler;
    const body = {
      model: "fake-model",
      messages: [
        { role: "system", content: "You are terse." },
        { role: "user", content },
      ],
      ctxr: { conversation_id: `history-${run}-${i}`, ...options.ctxr },
    };
    await postText(url, "/v1/chat/completions", JSON.stringify(body), tally);
    options.onAnswer?.();
  });
  return { tally, bytes: requests * messageBytes, ms: performance.now() - started };
}

export interface TinyUpstream {
  readonly url: string;
  readonly requests: number;
  /** The forwarded message contents of the last chat request (for history checks; non-string contents as null). */
  lastMessages(): (string | null)[];
  stop(): Promise<void>;
}

export interface TinyUpstreamOptions {
  /** Streaming answers (stream: true): this many SSE chunks (default 20). */
  streamChunks?: number;
  /** Bytes of content in each SSE chunk (default 16). */
  streamChunkBytes?: number;
}

/**
 * An OpenAI-compatible upstream that reads each body and answers a fixed chat
 * completion (SSE when the request says stream: true), keeping nothing but the
 * last request's messages: unlike test/proxy/fakeUpstream.ts it does not
 * record bodies, so gigabytes can go through it.
 */
export function startTinyUpstream(options: TinyUpstreamOptions = {}): TinyUpstream {
  let requests = 0;
  let lastMessages: (string | null)[] = [];
  const chunks = options.streamChunks ?? 20;
  const piece = "w".repeat(options.streamChunkBytes ?? 16);
  const completion = JSON.stringify({
    id: "chatcmpl-tiny",
    object: "chat.completion",
    created: 1_700_000_000,
    model: "fake-model",
    choices: [{ index: 0, message: { role: "assistant", content: "The documents say forty-two." }, finish_reason: "stop" }],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
  });
  const chunk = `data: ${JSON.stringify({ id: "chatcmpl-tiny", object: "chat.completion.chunk", created: 1_700_000_000, model: "fake-model", choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] })}\n\n`;
  const encoded = new TextEncoder().encode(chunk);
  const done = new TextEncoder().encode("data: [DONE]\n\n");
  const server = serveForTest(async (request) => {
    requests++;
    const url = new URL(request.url);
    if (request.method === "GET" && url.pathname === "/v1/models") return Response.json({ object: "list", data: [{ id: "fake-model", object: "model" }] });
    const text = await request.text();
    let stream = false;
    try {
      const body = JSON.parse(text);
      stream = body?.stream === true;
      lastMessages = Array.isArray(body?.messages) ? body.messages.map((m: any) => (typeof m?.content === "string" ? m.content : null)) : [];
    } catch {
      lastMessages = [];
    }
    if (!stream) return new Response(completion, { headers: { "content-type": "application/json" } });
    let sent = 0;
    return new Response(
      new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent < chunks) {
            sent++;
            controller.enqueue(encoded);
          } else {
            controller.enqueue(done);
            controller.close();
          }
        },
      }),
      { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } },
    );
  }, { idleTimeoutS: 0 });
  return {
    url: `http://127.0.0.1:${server.port}`,
    get requests() {
      return requests;
    },
    lastMessages: () => lastMessages,
    async stop() {
      await server.stop(true);
    },
  };
}

/** POSTs JSON through a Client and throws unless 2xx: for the correctness checks. */
export async function postOk(c: Client, path: string, body: unknown): Promise<any> {
  const answer = await c.post(path, body);
  if (answer.status < 200 || answer.status > 299) throw new Error(`${path} answered ${answer.status}: ${answer.text.slice(0, 500)}`);
  return answer.body;
}
