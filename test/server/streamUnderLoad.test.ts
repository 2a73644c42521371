/**
 * Streams under load (issue 26): 16 concurrent streamed chat requests with documents against
 * `serve --model` on a model slow enough (8 layers, one runner thread, long documents, KV-managed
 * prefills one at a time) that most of them wait in the engine's queue for longer than Bun's
 * default idleTimeout (10 s) before their first token. Bun closes a connection that writes nothing
 * for that long; the server's keep-alive comments keep every stream open, so each one gets its
 * answer and `data: [DONE]`. Non-streamed requests queued behind them complete too.
 *
 * The server runs with its defaults (Bun's idle timeout, the default keep-alive interval); the
 * document length is calibrated on this machine so that the queue really outlasts the idle timeout,
 * and the test checks that it did.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

const STREAMS = 16;
const PLAIN = 2;
/** Bun.serve's default idleTimeout, which today's server keeps. */
const BUN_IDLE_TIMEOUT_MS = 10_000;
/** What one request's prefill should take, so that 16 of them in a row outlast the idle timeout with room to spare. */
const TARGET_REQUEST_MS = 1500;

let model: { path: string; cleanup(): void };
let api: EngineTestServer;

beforeAll(async () => {
  model = tinyModelFolder({ layers: 8, hidden: 384, heads: 6, kvHeads: 2, intermediate: 1024, seed: 3 }, "slow");
  api = await startEngineServer(model.path, { threads: 1, kvBlocks: 768 });
}, 300_000);

afterAll(async () => {
  await api?.close();
  model?.cleanup();
});

/** A document of `length` byte tokens that no other request shares (no cached KV to reuse). */
function uniqueDocument(tag: string, length: number): string {
  let state = [...tag].reduce((hash, ch) => (hash * 31 + ch.charCodeAt(0)) >>> 0, 7);
  let text = `${tag}: `;
  while (text.length < length) {
    state = (state * 1103515245 + 12345) >>> 0;
    text += String.fromCharCode(97 + (state >>> 16) % 26);
  }
  return text;
}

const chatBody = (tag: string, length: number, stream: boolean) => ({
  messages: [{ role: "user", content: `What does ${tag} say?` }],
  documents: [{ id: tag, text: uniqueDocument(tag, length) }],
  max_tokens: 4,
  temperature: 0,
  stream,
});

interface StreamOutcome {
  status: number;
  /** ms from the request to its first data event after the role chunk (content, or the finish). */
  firstTokenMs: number | null;
  totalMs: number;
  data: string[];
  keepAlives: number;
  error: string | null;
}

async function streamChat(body: unknown): Promise<StreamOutcome> {
  const started = performance.now();
  const outcome: StreamOutcome = { status: 0, firstTokenMs: null, totalMs: 0, data: [], keepAlives: 0, error: null };
  try {
    const response = await fetch(`${api.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    outcome.status = response.status;
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const bytes of response.body!) {
      buffer += decoder.decode(bytes, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (event.startsWith(":")) outcome.keepAlives++;
        if (!event.startsWith("data: ")) continue;
        outcome.data.push(event.slice(6));
        if (outcome.data.length === 2) outcome.firstTokenMs = performance.now() - started;
      }
    }
  } catch (error) {
    outcome.error = String(error);
  }
  outcome.totalMs = performance.now() - started;
  return outcome;
}

test(`${STREAMS} concurrent streams whose first token comes after Bun's ${BUN_IDLE_TIMEOUT_MS / 1000} s idle timeout all end with [DONE]; queued non-streamed requests complete`, async () => {
  // Calibration: one request alone, to size the documents for this machine.
  const probeLength = 1500;
  const probeStart = performance.now();
  const probe = await api.post("/v1/chat/completions", chatBody("probe", probeLength, false));
  expect(probe.status).toBe(200);
  const probeMs = performance.now() - probeStart;
  const length = Math.max(400, Math.min(3500, Math.round((probeLength * TARGET_REQUEST_MS) / probeMs)));

  const started = performance.now();
  const streams = Array.from({ length: STREAMS }, (_, i) => streamChat(chatBody(`stream-${i}`, length, true)));
  // Queued behind the streams: they wait the longest.
  const plain = Array.from({ length: PLAIN }, async (_, i) => {
    const answer = await api.post("/v1/chat/completions", chatBody(`plain-${i}`, length, false));
    return { ...answer, ms: performance.now() - started };
  });
  const outcomes = await Promise.all(streams);
  const plainAnswers = await Promise.all(plain);

  for (const outcome of outcomes) {
    expect(outcome.error).toBeNull();
    expect(outcome.status).toBe(200);
    expect(outcome.data.at(-1)).toBe("[DONE]");
    expect(outcome.data.some((data) => data.includes('"error"'))).toBe(false);
    const finish = outcome.data.slice(0, -1).map((data) => JSON.parse(data)).find((chunk) => chunk.choices[0]?.finish_reason != null);
    expect(finish?.choices[0].finish_reason).toBe("length");
  }
  // The premise: streams really waited longer than the idle timeout for their first token, writing
  // only keep-alive comments meanwhile.
  const late = outcomes.filter((outcome) => (outcome.firstTokenMs ?? 0) > BUN_IDLE_TIMEOUT_MS + 500);
  expect(late.length).toBeGreaterThan(0);
  for (const outcome of late) expect(outcome.keepAlives).toBeGreaterThanOrEqual(2);

  for (const answer of plainAnswers) {
    expect(answer.status).toBe(200);
    expect(answer.body.choices[0].finish_reason).toBe("length");
    expect(answer.ms).toBeGreaterThan(BUN_IDLE_TIMEOUT_MS + 500);
    expect(answer.body.usage.ctxr.queue_ms).toBeGreaterThan(BUN_IDLE_TIMEOUT_MS / 2);
  }
}, 180_000);
