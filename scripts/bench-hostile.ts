/**
 * Hostile clients against `ctxr serve` with DEFAULT flags (issue 18): each
 * probe starts a fresh server in a child process (`--in-memory --port 0`, plus
 * `--upstream` to a local fake engine for the proxy probes), sends its traffic
 * over 127.0.0.1 and reports the server's peak RSS (VmHWM of the bun child),
 * wall time, requests, statuses (5xx count) and, for the connection attacks,
 * the p50 latency of normal requests during the attack vs. before it.
 *
 *  amplification   the reviewer's 19 KB /v1/reorder (templates repeating {order}
 *                  x100 and {n} x1,365), with 1 and 3 contexts; a request within
 *                  the placeholder limit but over --max-annotation-bytes; then
 *                  the largest annotations the default limit lets through (~16 MB
 *                  answers), repeatedly. Target: peak RSS <= 512 MB, no 5xx.
 *  index           --gb-ids of distinct 1,000-character ids sent to /v1/reorder
 *                  (4 MB requests, 2 in flight), then /v1/reset (RSS after it).
 *  dedup           --gb-ids of distinct ids sent to /v1/dedup, round-robin over 8
 *                  conversations, then /v1/reset. Target (index, dedup): <= 1 GB.
 *  history         --gb-history of 7 MB chat requests through the proxy, each a
 *                  new conversation (ctxr.conversation_id), 8 XML documents at the
 *                  head of each message. Target: <= 1 GB, no 5xx.
 *  history-plain   the same without documents (the history store alone).
 *  never-reading   --connections clients open streaming chat requests whose
 *                  answers are --stream-mb each and never read them, for
 *                  --attack-seconds; small proxied chat requests are timed meanwhile.
 *  grammar         issue 27's structured-output and tool probes on a tiny-model server
 *                  (--threads 1): status, /healthz stall, peak RSS, and a json_object
 *                  request after each (test/security/grammarProbes.ts).
 *  state-*         the state shared through Redis (issue 27): a garbage entry, XDEL, a
 *                  garbage snapshot, an outage flood (scripts/benchHostileSharedState.ts).
 *  slow-clients    --connections slow-loris clients (half trickle their headers,
 *                  half a declared body, a byte every 100 ms per connection) for
 *                  --attack-seconds; small /v1/reorder requests are timed meanwhile.
 *
 * KV events (issue 27; each notes the stall: the longest /healthz answer during it):
 *  kv-undecodable  a hostile engine publisher (--kv-events) sends --kv-payloads
 *                  15 MiB payloads that are not msgpack, consecutive sequence numbers.
 *  kv-empty-maps   one batch of 15M empty maps (15 MiB).
 *  kv-blocks       --kv-blocks-m million BlockStored blocks with random hashes, in
 *                  batches of 10,000 (default --max-routing-bytes).
 *  kv-connections  --kv-connections idle TCP connections to `serve --model
 *                  --kv-events-publish`'s PUB socket (never greeting), with a
 *                  completion asked for meanwhile; waits for the handshake deadline.
 *                  Notes the CPU time the server's request thread and its KV
 *                  publisher thread (a Worker) used meanwhile.
 *
 * Usage: npx bun scripts/bench-hostile.ts [--quick] [--gb-ids 1] [--gb-history 2]
 *          [--connections N] [--attack-seconds S] [--stream-mb 16] [--probes a,b,...]
 * --quick sends a tenth of the bytes (and of the connections, a third of the time).
 * Prints a progress line per probe on stderr, then a markdown table and a final
 * JSON line on stdout.
 *
 * test/security/stateBudgets.test.ts and amplification.test.ts run the same
 * traffic with small budgets in CI. --quick on the 2-core dev box (bun 1.4.5,
 * start RSS 56 MiB; peak RSS): amplification 242 MiB; index 332 MiB; dedup
 * 280 MiB; history 552 MiB (270 MiB still after /v1/reset: documents' hash
 * memo pins whole messages); history-plain 457 MiB; never-reading (50 x 16 MB)
 * 343 MiB (~2-3 MB per unread stream, Bun's fetch read-ahead); slow-clients
 * 64 MiB; no 5xx, p50 of normal requests unchanged (< 0.5 ms).
 */
import net from "node:net";
import { readdirSync, readFileSync } from "node:fs";
import {
  GiB,
  MiB,
  StatusTally,
  mib,
  procStatusBytes,
  sendDedupIds,
  sendHistories,
  sendReorderIds,
  startCtxr,
  startTinyUpstream,
  type Ctxr,
  type HostileProbeResult,
  type TinyUpstream,
} from "../test/security/hostileKit.ts";
import { tinyModelFolder } from "../test/helpers/engineKit.ts";
import { AMBIGUOUS_COMPLETION, VALID_JSON_OBJECT, grammarProbes, letterRun, post as postJson, useToolsTemplate } from "../test/security/grammarProbes.ts";
import { SHARED_STATE_PROBES, stateGarbageEntry, stateGarbageSnapshot, stateOutageFlood, stateXdel } from "./benchHostileSharedState.ts";
import { emptyBatchPayload, emptyMapsPayload, floodConnections, HostilePublisher, randomBlockStoredPayload, subscriberStats, undecodablePayload, watchHealthz } from "../test/security/kvEventsHostileKit.ts";

const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const at = args.indexOf(name);
  return at >= 0 && args[at + 1] !== undefined ? args[at + 1]! : fallback;
};
const QUICK = args.includes("--quick");
const scale = QUICK ? 0.1 : 1;
const GB_IDS = Number(option("--gb-ids", "1")) * scale;
const GB_HISTORY = Number(option("--gb-history", "2")) * scale;
const CONNECTIONS = Number(option("--connections", String(QUICK ? 50 : 500)));
const ATTACK_MS = Number(option("--attack-seconds", QUICK ? "5" : "15")) * 1000;
const STREAM_MB = Number(option("--stream-mb", "16"));
const KV_PAYLOADS = Number(option("--kv-payloads", QUICK ? "30" : "300"));
const KV_BLOCKS_M = Number(option("--kv-blocks-m", QUICK ? "0.5" : "5"));
const KV_CONNECTIONS = Number(option("--kv-connections", QUICK ? "2000" : "10000"));
const ALL_PROBES = ["amplification", "index", "dedup", "history", "history-plain", "never-reading", "slow-clients", "grammar", ...SHARED_STATE_PROBES, "kv-undecodable", "kv-empty-maps", "kv-blocks", "kv-connections"];
const PROBES = option("--probes", ALL_PROBES.join(",")).split(",");
for (const p of PROBES) if (!ALL_PROBES.includes(p)) throw new Error(`unknown probe ${p} (${ALL_PROBES.join(", ")})`);

const progress = (line: string) => process.stderr.write(`${line}\n`);

type ProbeResult = HostileProbeResult;

function median(xs: number[]): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Runs a probe on a fresh server; `body` returns the traffic it sent. */
async function probe(
  name: string,
  options: { upstream?: TinyUpstream },
  body: (ctxr: Ctxr, tally: StatusTally, result: ProbeResult) => Promise<void>,
): Promise<ProbeResult> {
  const ctxr = await startCtxr(options.upstream ? ["--upstream", options.upstream.url] : []);
  const tally = new StatusTally();
  const result: ProbeResult = {
    probe: name,
    traffic: "",
    start_rss_bytes: ctxr.peakRss(),
    peak_rss_bytes: 0,
    rss_after_reset_bytes: null,
    wall_ms: 0,
    requests: 0,
    statuses: {},
    five_xx: 0,
    p50_ms_before: null,
    p50_ms_during: null,
    notes: "",
  };
  const started = performance.now();
  try {
    await body(ctxr, tally, result);
  } catch (error) {
    result.notes += ` probe failed: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    result.wall_ms = Math.round(performance.now() - started);
    result.peak_rss_bytes = procStatusBytes(ctxr.pid, "VmHWM") ?? -1;
    if (result.peak_rss_bytes === -1) result.notes += " server exited: " + ctxr.stderr().slice(-500);
    await ctxr.stop();
  }
  result.requests = tally.requests;
  result.statuses = tally.counts;
  result.five_xx = tally.fiveHundreds;
  if (tally.samples.length > 0 && tally.non2xx > 0) result.notes += ` first non-2xx: ${tally.samples[0]!.slice(0, 120)}`;
  progress(`${name}: peak ${mib(result.peak_rss_bytes)} (start ${mib(result.start_rss_bytes)}), ${result.requests} requests, ${JSON.stringify(result.statuses)}, ${result.wall_ms} ms${result.notes ? ";" + result.notes : ""}`);
  return result;
}

async function post(url: string, path: string, body: unknown, tally: StatusTally): Promise<{ status: number; text: string }> {
  try {
    const response = await fetch(url + path, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body), headers: { "content-type": "application/json" } });
    const text = await response.text();
    tally.add(response.status, text);
    return { status: response.status, text };
  } catch (error) {
    tally.add("error", String(error));
    return { status: -1, text: String(error) };
  }
}

async function resetAndMeasure(ctxr: Ctxr, tally: StatusTally, result: ProbeResult): Promise<void> {
  await post(ctxr.url, "/v1/reset", "", tally);
  await Bun.sleep(1000);
  result.rss_after_reset_bytes = procStatusBytes(ctxr.pid, "VmRSS");
}

/**
 * Times `request` sequentially, 10 ms apart, at most `count` times and for at
 * most `ms`; returns the latencies (ms).
 */
async function timeRequests(request: () => Promise<unknown>, count: number, ms: number): Promise<number[]> {
  const latencies: number[] = [];
  const deadline = performance.now() + ms;
  for (let i = 0; i < count && performance.now() < deadline; i++) {
    const t = performance.now();
    await request();
    latencies.push(performance.now() - t);
    await Bun.sleep(10);
  }
  return latencies;
}

// ---------------------------------------------------------------------------------------------

async function amplification(): Promise<ProbeResult> {
  return probe("amplification", {}, async (ctxr, tally, result) => {
    const blocks = Array.from({ length: 1024 }, (_, i) => i);
    const reviewer = { priority: "{order}".repeat(100), doc: "{n}".repeat(1365), separator: "s".repeat(4000) };
    for (const contexts of [1, 3]) await post(ctxr.url, "/v1/reorder", { contexts: Array.from({ length: contexts }, () => blocks), templates: reviewer }, tally);
    await post(ctxr.url, "/v1/reorder", { contexts: [blocks], templates: { priority: "{order}".repeat(4), doc: "{n}".repeat(4) + "d".repeat(4084), separator: "s".repeat(4000) } }, tally);
    // 4 x {order} of 1,024 labels "{n}" + 4,089 characters: 16,772,776 bytes, just under the default 16 MiB.
    const largest = { priority: "{order}".repeat(4), doc: "{n}" + "d".repeat(4089), separator: " > " };
    const repeats = QUICK ? 10 : 50;
    let answered = 0;
    for (let i = 0; i < repeats; i++) {
      const answer = await post(ctxr.url, "/v1/reorder", { contexts: [blocks.map((b) => b + i * 1024)], templates: largest }, tally);
      if (answer.status === 200) answered = Math.max(answered, answer.text.length);
    }
    result.traffic = `reviewer's 19 KB request (1 and 3 contexts), 1 over the annotation limit, ${repeats} at the limit (answers ${mib(answered)})`;
  });
}

async function index(): Promise<ProbeResult> {
  return probe("index", {}, async (ctxr, tally, result) => {
    const sent = await sendReorderIds(ctxr.url, { totalBytes: GB_IDS * GiB, contexts: 4 });
    tally.merge(sent.tally);
    const stats = await ctxr.stats();
    result.traffic = `${mib(sent.bytes)} of ids to /v1/reorder`;
    result.notes = ` index_bytes ${mib(stats.index_bytes)} of ${mib(stats.index_bytes_limit)}, ${stats.index_budget_evicted_contexts} evicted`;
    await resetAndMeasure(ctxr, tally, result);
  });
}

async function dedup(): Promise<ProbeResult> {
  return probe("dedup", {}, async (ctxr, tally, result) => {
    const sent = await sendDedupIds(ctxr.url, { totalBytes: GB_IDS * GiB, conversations: 8 });
    tally.merge(sent.tally);
    const stats = await ctxr.stats();
    result.traffic = `${mib(sent.bytes)} of ids to /v1/dedup`;
    result.notes = ` dedup_bytes ${mib(stats.dedup_bytes)} of ${mib(stats.dedup_bytes_limit)}, ${stats.dedup_budget_evicted_conversations} evicted`;
    await resetAndMeasure(ctxr, tally, result);
  });
}

async function history(documents: number): Promise<ProbeResult> {
  const upstream = startTinyUpstream();
  try {
    return await probe(documents > 0 ? "history" : "history-plain", { upstream }, async (ctxr, tally, result) => {
      const sent = await sendHistories(ctxr.url, { totalBytes: GB_HISTORY * GiB, messageBytes: 7_000_000, documents });
      tally.merge(sent.tally);
      const stats = await ctxr.stats();
      result.traffic = `${mib(sent.bytes)} of history (7 MB chats${documents > 0 ? `, ${documents} documents each` : ""})`;
      result.notes = ` history_bytes ${mib(stats.proxy.history_bytes)} of ${mib(stats.proxy.history_bytes_limit)}, ${stats.proxy.history_budget_evicted_conversations} evicted; index ${mib(stats.index_bytes)}, dedup ${mib(stats.dedup_bytes)}`;
      await resetAndMeasure(ctxr, tally, result);
    });
  } finally {
    await upstream.stop();
  }
}

/** Opens a raw connection to 127.0.0.1:port; resolves once connected. */
function openSocket(port: number, onClose: () => void): Promise<net.Socket> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.on("error", () => {}); // ECONNRESET when ctxr drops it: counted by onClose
    socket.on("close", onClose);
    socket.on("connect", () => resolve(socket));
  });
}

async function neverReading(): Promise<ProbeResult> {
  const chunkBytes = 16 * 1024;
  const upstream = startTinyUpstream({ streamChunks: Math.ceil((STREAM_MB * MiB) / chunkBytes), streamChunkBytes: chunkBytes });
  try {
    return await probe("never-reading", { upstream }, async (ctxr, tally, result) => {
      const chat = { model: "fake-model", messages: [{ role: "user", content: "Say something." }] };
      const normal = () => post(ctxr.url, "/v1/chat/completions", chat, tally);
      result.p50_ms_before = median(await timeRequests(normal, 200, 3000));

      const port = Number(new URL(ctxr.url).port);
      const body = JSON.stringify({ ...chat, stream: true });
      const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
      let closed = 0;
      const sockets: net.Socket[] = [];
      for (let i = 0; i < CONNECTIONS; i++) {
        const socket = await openSocket(port, () => void closed++);
        socket.pause(); // never read: the answer piles up in the kernel buffers, then wherever ctxr keeps it
        socket.write(head + body);
        sockets.push(socket);
      }
      await Bun.sleep(500);
      result.p50_ms_during = median(await timeRequests(normal, 10_000, ATTACK_MS));
      const upstreamRequests = upstream.requests;
      for (const socket of sockets) socket.destroy();
      result.traffic = `${CONNECTIONS} unread streams of ${STREAM_MB} MB for ${ATTACK_MS / 1000} s`;
      result.notes = ` upstream saw ${upstreamRequests} requests; ${closed} sockets closed by ctxr during the attack`;
    });
  } finally {
    await upstream.stop();
  }
}

async function slowClients(): Promise<ProbeResult> {
  return probe("slow-clients", {}, async (ctxr, tally, result) => {
    const normal = () => post(ctxr.url, "/v1/reorder", { contexts: [[1, 2, 3]] }, tally);
    result.p50_ms_before = median(await timeRequests(normal, 200, 3000));

    const port = Number(new URL(ctxr.url).port);
    const body = JSON.stringify({ contexts: [[1, 2, 3, 4, 5, 6, 7, 8]] }).padEnd(1000, " ");
    const heads = `POST /v1/reorder HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nX-Padding: ${"p".repeat(2000)}\r\nContent-Length: ${body.length}\r\n\r\n`;
    let closed = 0;
    const clients: { socket: net.Socket; text: string; at: number }[] = [];
    for (let i = 0; i < CONNECTIONS; i++) {
      const socket = await openSocket(port, () => void closed++);
      socket.on("data", () => {}); // answers (408, 400...) are read and dropped
      // Half trickle the headers from the start; half send the headers and trickle the body.
      const text = i % 2 === 0 ? heads + body : body;
      if (i % 2 === 1) socket.write(heads);
      clients.push({ socket, text, at: 0 });
    }
    const timer = setInterval(() => {
      for (const client of clients) {
        if (client.socket.destroyed || client.at >= client.text.length) continue;
        client.socket.write(client.text[client.at++]!);
      }
    }, 100);
    await Bun.sleep(500);
    result.p50_ms_during = median(await timeRequests(normal, 10_000, ATTACK_MS));
    clearInterval(timer);
    const open = clients.filter((c) => !c.socket.destroyed).length;
    for (const client of clients) client.socket.destroy();
    result.traffic = `${CONNECTIONS} slow-loris connections (1 byte / 100 ms each) for ${ATTACK_MS / 1000} s`;
    result.notes = ` ${open} of ${CONNECTIONS} still open at the end`;
  });
}

// --- structured outputs and tools (issue 27) --------------------------------------------------

interface GrammarProbeResult {
  probe: string;
  status: number;
  message: string;
  stall_ms: number;
  wall_ms: number;
  peak_rss_bytes: number;
  /** Status of a valid json_object request right after the probe. */
  after: number;
}

/**
 * Issue 27's structured-output probes (test/security/grammarProbes.ts) on one tiny-model server
 * at --threads 1 with default flags: each request's status, the longest /healthz answer while it
 * ran, the server's peak RSS after it, and a valid json_object request's status right after; then
 * the ambiguous grammar beside plain completions, /tokenize of 7 MB and 4 x 1 MB, and 1 MB chat
 * and completion prompts (tokenized, then refused as too long).
 */
async function grammarSurfaces(): Promise<GrammarProbeResult[]> {
  const model = tinyModelFolder({}, "tiny");
  useToolsTemplate(model.path);
  const ctxr = await startCtxr(["--model", model.path, "--threads", "1", "--kv-blocks", "256"]);
  const out: GrammarProbeResult[] = [];
  const record = async (probe: string, work: () => Promise<{ status: number; text: string }>) => {
    // /healthz polled from a process of its own: this one's JSON work (a million-token answer) is not the server's stall.
    const healthz = watchHealthz(ctxr.url, 10);
    await Bun.sleep(50);
    const started = performance.now();
    const result = await work();
    const timed = { result, wallMs: performance.now() - started, stallMs: (await healthz.stop()).maxMs };
    let message = "";
    try {
      message = JSON.parse(timed.result.text).error?.message ?? "";
    } catch {}
    const after = (await postJson(ctxr.url, "/v1/chat/completions", VALID_JSON_OBJECT)).status;
    out.push({ probe, status: timed.result.status, message: message.slice(0, 120), stall_ms: timed.stallMs, wall_ms: timed.wallMs, peak_rss_bytes: ctxr.peakRss(), after });
    progress(`  grammar ${probe}: ${timed.result.status}, stall ${timed.stallMs.toFixed(1)} ms, wall ${timed.wallMs.toFixed(0)} ms, peak ${mib(ctxr.peakRss())}, json_object after: ${after}`);
  };
  try {
    await record("valid json_object (baseline)", () => postJson(ctxr.url, "/v1/chat/completions", VALID_JSON_OBJECT));
    for (const probe of grammarProbes()) await record(probe.name, () => postJson(ctxr.url, probe.path, probe.body));
    const plain = { prompt: "hello", max_tokens: 8, temperature: 0 };
    let alone = 0;
    await record("plain 8-token completion alone", async () => {
      const started = performance.now();
      const answer = await postJson(ctxr.url, "/v1/completions", plain);
      alone = performance.now() - started;
      return answer;
    });
    const ambiguous = postJson(ctxr.url, "/v1/completions", AMBIGUOUS_COMPLETION);
    await Bun.sleep(300);
    let beside = 0;
    await record("plain 8-token completion beside the ambiguous grammar", async () => {
      const started = performance.now();
      const answer = await postJson(ctxr.url, "/v1/completions", plain);
      beside = performance.now() - started;
      return answer;
    });
    await record("ambiguous grammar, min_tokens 800", () => ambiguous);
    progress(`  plain completion: alone ${alone.toFixed(0)} ms, beside the ambiguous grammar ${beside.toFixed(0)} ms`);
    await record("/tokenize 7 MB with return_token_strs", () => postJson(ctxr.url, "/tokenize", { prompt: letterRun(7 * 1024 * 1024), return_token_strs: true }));
    const mb = letterRun(1000 * 1024);
    await record("/tokenize 4 x 1 MB with return_token_strs at once", async () => {
      const answers = await Promise.all(Array.from({ length: 4 }, () => postJson(ctxr.url, "/tokenize", { prompt: mb, return_token_strs: true })));
      return answers.find((answer) => answer.status !== 200) ?? { status: 200, text: "" };
    });
    await record("chat completion, 1 MB prompt (too long)", () => postJson(ctxr.url, "/v1/chat/completions", { messages: [{ role: "user", content: mb }], max_tokens: 1 }));
    await record("completion, 1 MB prompt (too long)", () => postJson(ctxr.url, "/v1/completions", { prompt: mb, max_tokens: 1 }));
  } finally {
    await ctxr.stop();
    model.cleanup();
  }
  return out;
}

function grammarTable(rows: GrammarProbeResult[]): string {
  return [
    "| probe (tiny model, --threads 1) | status | /healthz stall (ms) | wall (ms) | peak RSS | json_object after | message |",
    "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ...rows.map((r) => `| ${r.probe} | ${r.status} | ${r.stall_ms.toFixed(1)} | ${r.wall_ms.toFixed(0)} | ${mib(r.peak_rss_bytes)} | ${r.after} | ${r.message.replaceAll("|", "\\|")} |`),
  ].join("\n");
}

// KV events (issue 27): a hostile engine publisher against --kv-events, a connection flood against
// --kv-events-publish. Each starts its own server (its arguments differ from probe()'s).

async function kvEventsProbe(name: string): Promise<ProbeResult> {
  const result: ProbeResult = { probe: name, traffic: "", start_rss_bytes: 0, peak_rss_bytes: 0, rss_after_reset_bytes: null, wall_ms: 0, requests: 0, statuses: {}, five_xx: 0, p50_ms_before: null, p50_ms_during: null, notes: "" };
  const upstream = name === "kv-connections" ? null : startTinyUpstream();
  const publisher = name === "kv-connections" ? null : await HostilePublisher.open();
  const model = name === "kv-connections" ? tinyModelFolder({ layers: 1, seed: 27 }, "bench-kv-connections") : null;
  const args = model !== null ? ["--model", model.path, "--kv-blocks", "64", "--threads", "1", "--kv-events-publish", "tcp://127.0.0.1:0"] : ["--upstream", upstream!.url, "--kv-events", publisher!.endpoint];
  const ctxr = await startCtxr(args);
  const tally = new StatusTally();
  result.start_rss_bytes = ctxr.peakRss();
  const started = performance.now();
  let healthz: ReturnType<typeof watchHealthz> | null = null;
  try {
    if (publisher !== null) await publisher.subscribed();
    if (name === "kv-undecodable") {
      const payload = undecodablePayload(15 * MiB);
      healthz = watchHealthz(ctxr.url);
      for (let seq = 0; seq < KV_PAYLOADS; seq++) await publisher!.publish(BigInt(seq), payload);
      await waitForSubscriber(ctxr, (s) => (s.subscriber.malformed.msgpack ?? 0) >= KV_PAYLOADS);
      result.traffic = `${KV_PAYLOADS} undecodable 15 MiB payloads, consecutive sequence numbers`;
    } else if (name === "kv-empty-maps") {
      const payload = emptyMapsPayload(15_000_000);
      healthz = watchHealthz(ctxr.url);
      await publisher!.publish(0n, payload);
      await publisher!.publish(1n, emptyBatchPayload());
      await waitForSubscriber(ctxr, (s) => s.subscriber.batches >= 1);
      result.traffic = "one batch of 15M empty maps (15 MiB)";
    } else if (name === "kv-blocks") {
      const batches = Math.round((KV_BLOCKS_M * 1e6) / 10_000);
      healthz = watchHealthz(ctxr.url);
      // Each batch built as it is sent (~1 ms of this process's time): 10,000 fresh random hashes.
      for (let i = 0; i < batches; i++) await publisher!.publish(BigInt(i), randomBlockStoredPayload(10_000));
      await waitForSubscriber(ctxr, (s) => s.subscriber.batches >= batches);
      result.traffic = `${KV_BLOCKS_M}M BlockStored blocks, random hashes, ${batches} batches of 10,000`;
    } else {
      const port = Number(/publishing KV events on tcp:\/\/127\.0\.0\.1:(\d+)/.exec(ctxr.startLines.join("\n"))![1]);
      healthz = watchHealthz(ctxr.url);
      const cpuBefore = threadCpuMs(ctxr.pid);
      const flood = await floodConnections(port, KV_CONNECTIONS);
      const completion = await post(ctxr.url, "/v1/completions", { prompt: "The mill by the river", max_tokens: 2, temperature: 0 }, tally);
      const deadline = Date.now() + 30_000;
      while (flood.closed() < KV_CONNECTIONS && Date.now() < deadline) await Bun.sleep(50);
      const cpuAfter = threadCpuMs(ctxr.pid);
      const metrics = await (await fetch(`${ctxr.url}/metrics`)).text();
      const counter = (metric: string) => /^\S+ (\d+)$/m.exec(metrics.split("\n").find((l) => l.startsWith(metric + " ")) ?? "")?.[1] ?? "?";
      for (const socket of flood.sockets) socket.destroy();
      result.traffic = `${KV_CONNECTIONS} idle connections to the PUB socket, a completion meanwhile`;
      result.notes = ` completion ${completion.status}; ${flood.closed()} of ${KV_CONNECTIONS} closed by ctxr; refused ${counter("ctxr_kv_events_refused_connections_total")}, handshake timeouts ${counter("ctxr_kv_events_handshake_timeouts_total")}; CPU meanwhile: request thread ${cpuAfter.main - cpuBefore.main} ms, worker threads ${cpuAfter.workers - cpuBefore.workers} ms`;
    }
    if (publisher !== null) {
      const s = await subscriberStats(ctxr.url);
      result.notes = ` malformed ${JSON.stringify(s.subscriber.malformed)}, batches ${s.subscriber.batches}, mirror ${s.blocks} blocks ${mib(s.bytes)} (${s.evictedForBytes} forgotten), routing_bytes ${mib(s.proxy.routing_bytes)} of ${mib(s.proxy.routing_bytes_limit)}`;
    }
  } catch (error) {
    result.notes += ` probe failed: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    const stall = healthz === null ? null : await healthz.stop();
    if (stall !== null) result.notes = ` stall ${stall.maxMs.toFixed(0)} ms (${stall.samples} /healthz, ${stall.failures} failed);` + result.notes;
    result.wall_ms = Math.round(performance.now() - started);
    result.peak_rss_bytes = procStatusBytes(ctxr.pid, "VmHWM") ?? -1;
    await ctxr.stop();
    await publisher?.close();
    await upstream?.stop();
    model?.cleanup();
  }
  result.requests = tally.requests;
  result.statuses = tally.counts;
  result.five_xx = tally.fiveHundreds;
  progress(`${name}: peak ${mib(result.peak_rss_bytes)} (start ${mib(result.start_rss_bytes)}), ${result.wall_ms} ms;${result.notes}`);
  return result;
}

/** CPU time (ms) of a process's threads: its main (request) thread and those named `Worker`, summed. */
function threadCpuMs(pid: number): { main: number; workers: number } {
  const out = { main: 0, workers: 0 };
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ms = (Number(fields[11]) + Number(fields[12])) * 10; // utime + stime, USER_HZ 100
    if (tid === String(pid)) out.main += ms;
    else if (name === "Worker") out.workers += ms;
  }
  return out;
}

async function waitForSubscriber(ctxr: Ctxr, done: (stats: any) => boolean, timeoutMs = 600_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done(await subscriberStats(ctxr.url))) {
    if (Date.now() > deadline) throw new Error("the subscriber did not get through the payloads in time");
    await Bun.sleep(100);
  }
}

// ---------------------------------------------------------------------------------------------

const results: ProbeResult[] = [];
const grammarResults: GrammarProbeResult[] = [];
progress(`bench-hostile${QUICK ? " --quick" : ""}: ids ${GB_IDS} GiB, history ${GB_HISTORY} GiB, ${CONNECTIONS} connections, ${ATTACK_MS / 1000} s attacks, ${STREAM_MB} MB streams; probes ${PROBES.join(", ")}`);
for (const name of PROBES) {
  if (name === "amplification") results.push(await amplification());
  if (name === "index") results.push(await index());
  if (name === "dedup") results.push(await dedup());
  if (name === "history") results.push(await history(8));
  if (name === "history-plain") results.push(await history(0));
  if (name === "never-reading") results.push(await neverReading());
  if (name === "slow-clients") results.push(await slowClients());
  if (name === "grammar") grammarResults.push(...(await grammarSurfaces()));
  if (name === "state-garbage-entry") results.push(await stateGarbageEntry(QUICK));
  if (name === "state-xdel") results.push(await stateXdel());
  if (name === "state-garbage-snapshot") results.push(await stateGarbageSnapshot());
  if (name === "state-outage-flood") results.push(await stateOutageFlood(QUICK));
  if (name.startsWith("kv-")) results.push(await kvEventsProbe(name));
}

const ms = (x: number | null) => (x === null ? "" : x.toFixed(2));
const lines = [
  "| probe | traffic | peak RSS | start RSS | RSS after reset | wall | requests | statuses | 5xx | p50 before (ms) | p50 during (ms) | notes |",
  "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
  ...results.map(
    (r) =>
      `| ${r.probe} | ${r.traffic} | ${mib(r.peak_rss_bytes)} | ${mib(r.start_rss_bytes)} | ${r.rss_after_reset_bytes === null ? "" : mib(r.rss_after_reset_bytes)} | ${(r.wall_ms / 1000).toFixed(1)} s | ${r.requests} | ${Object.entries(r.statuses)
        .map(([s, n]) => `${s}: ${n}`)
        .join(", ")} | ${r.five_xx} | ${ms(r.p50_ms_before)} | ${ms(r.p50_ms_during)} | ${r.notes.trim()} |`,
  ),
];
console.log(lines.join("\n"));
if (grammarResults.length > 0) console.log(grammarTable(grammarResults));
console.log(JSON.stringify({ bench: "hostile", grammar: grammarResults, quick: QUICK, gb_ids: GB_IDS, gb_history: GB_HISTORY, connections: CONNECTIONS, attack_ms: ATTACK_MS, stream_mb: STREAM_MB, results }));
// The server kit's start-up timer would keep the process alive for a while.
process.exit(0);
