/**
 * The byte budgets of `ctxr serve` hold against hostile traffic (issue 18):
 * a real server in a child process gets several times its budget of
 * client-chosen state (ids sent to /v1/reorder and /v1/dedup, conversation
 * histories through the proxy), and its peak RSS (VmHWM of the bun child)
 * stays under a bound derived from the budget, the reported bytes stay under
 * the limits, the budget evicts, every answer is 2xx, and the answers that
 * depend on the kept state stay right.
 *
 * The budgets are small (16/8/16 MiB) so that ~400 MB of traffic exceeds them
 * 25-50 times over in a few seconds. The bound is
 *
 *   RSS at start + SLACK + 4 x budget
 *
 * where SLACK covers what a running server holds besides the budgeted state:
 * JavaScriptCore's heap headroom (it collects once the heap has grown, not at
 * every release) and the request and answer bodies in flight (2 requests of
 * 1-4 MB at a time, each parsed and echoed). Measured on the 2-core dev box
 * (start 56 MiB): peaks of 225 (index), 173 (dedup) and 244 MiB (history)
 * with the budgets, bounds 344-376 MiB, against 736, 710 and 675 MiB with the
 * same traffic and the budgets off. To check that these tests catch a budget
 * that is not enforced, run them with CTXR_HOSTILE_UNLIMITED=1: every budget
 * is then passed as 0 (unlimited) and the RSS and byte assertions fail.
 */
import { describe, expect, test } from "bun:test";
import { client } from "../server/serverKit.ts";
import { MiB, mib, postOk, sendDedupIds, sendHistories, sendReorderIds, startCtxr, startTinyUpstream, type Ctxr, type TrafficResult } from "./hostileKit.ts";

const UNLIMITED = process.env.CTXR_HOSTILE_UNLIMITED === "1";
const SLACK = 256 * MiB;
/** Ids or history sent per probe: 25 to 50 times the budgets below. */
const TRAFFIC = 400 * MiB;

const budgetFlag = (bytes: number) => (UNLIMITED ? "0" : `${bytes / MiB}MiB`);

/** Asserts the peak RSS bound and prints the figures (they document the margin). */
function expectPeakWithinBudget(ctxr: Ctxr, startRss: number, budget: number, what: string, traffic: TrafficResult, slack = SLACK): void {
  const peak = ctxr.peakRss();
  const bound = startRss + slack + 4 * budget;
  console.log(
    `${what}: ${mib(traffic.bytes)} in ${traffic.tally.requests} requests (${Math.round(traffic.ms)} ms); ` +
      `VmHWM ${mib(peak)} (start ${mib(startRss)}, bound ${mib(bound)}${UNLIMITED ? ", budget OFF" : ""})`,
  );
  expect(peak).toBeLessThanOrEqual(bound);
}

function expectAll2xx(traffic: TrafficResult): void {
  expect({ non2xx: traffic.tally.non2xx, samples: traffic.tally.samples }).toEqual({ non2xx: 0, samples: [] });
}

/** The value of an unlabelled Prometheus metric. */
async function metric(ctxr: Ctxr, name: string): Promise<number> {
  const text = (await ctxr.get("/metrics")).text;
  const match = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  if (!match) throw new Error(`/metrics has no ${name}`);
  return Number(match[1]);
}

describe("state budgets hold against hostile traffic (child ctxr serve, VmHWM)", () => {
  test("--max-index-bytes: client-chosen ids sent to /v1/reorder", async () => {
    const budget = 16 * MiB;
    const ctxr = await startCtxr(["--max-index-bytes", budgetFlag(budget)]);
    try {
      const start = ctxr.peakRss();
      const traffic = await sendReorderIds(ctxr.url, { totalBytes: TRAFFIC, contexts: 2 });
      expectAll2xx(traffic);
      expectPeakWithinBudget(ctxr, start, budget, "index", traffic);

      const stats = await ctxr.stats();
      expect(stats.index_bytes_limit).toBe(budget);
      expect(stats.index_bytes).toBeLessThanOrEqual(budget);
      expect(stats.index_budget_evicted_contexts).toBeGreaterThan(0);
      expect(await metric(ctxr, "ctxr_index_budget_evictions_total")).toBe(stats.index_budget_evicted_contexts);
      expect(await metric(ctxr, "ctxr_index_bytes")).toBeLessThanOrEqual(budget);

      // The index still works: a context just inserted is the prefix of the next one like it.
      const blocks = ["live-a", "live-b", "live-c"];
      await postOk(ctxr, "/v1/reorder", { contexts: [blocks] });
      const again = await postOk(ctxr, "/v1/reorder", { contexts: [[...blocks].reverse()] });
      expect(again.results[0].prefix_blocks).toBe(3);
      expect(new Set(again.results[0].blocks)).toEqual(new Set(blocks));
    } finally {
      await ctxr.stop();
    }
  }, 60_000);

  test("--max-dedup-bytes: client-chosen ids sent to /v1/dedup over many conversations", async () => {
    const budget = 8 * MiB;
    const ctxr = await startCtxr(["--max-dedup-bytes", budgetFlag(budget)]);
    try {
      const start = ctxr.peakRss();
      const traffic = await sendDedupIds(ctxr.url, { totalBytes: TRAFFIC, conversations: 8 });
      expectAll2xx(traffic);
      expectPeakWithinBudget(ctxr, start, budget, "dedup", traffic);

      const stats = await ctxr.stats();
      expect(stats.dedup_bytes_limit).toBe(budget);
      expect(stats.dedup_bytes).toBeLessThanOrEqual(budget);
      expect(stats.dedup_budget_evicted_conversations).toBeGreaterThan(0);
      expect(await metric(ctxr, "ctxr_dedup_budget_evictions_total")).toBe(stats.dedup_budget_evicted_conversations);

      // A live conversation still deduplicates what it just sent, and only that.
      const sent = Array.from({ length: 16 }, (_, i) => `live-${i}`);
      const first = await postOk(ctxr, "/v1/dedup", { conversation_id: "dedup-conversation-0", blocks: sent });
      expect(first.duplicates).toEqual([]);
      const second = await postOk(ctxr, "/v1/dedup", { conversation_id: "dedup-conversation-0", blocks: [...sent, "live-new"] });
      expect(second.duplicates).toEqual(sent);
      expect(second.blocks[16]).toBe("live-new");

      // /v1/reset forgets it all.
      await postOk(ctxr, "/v1/reset", undefined);
      const after = await ctxr.stats();
      expect(after.dedup_bytes).toBe(0);
      expect(after.conversations).toBe(0);
    } finally {
      await ctxr.stop();
    }
  }, 60_000);

  test("--max-history-bytes: big conversations through the proxy", async () => {
    const budget = 16 * MiB;
    const upstream = startTinyUpstream();
    const ctxr = await startCtxr(["--upstream", upstream.url, "--max-history-bytes", budgetFlag(budget)]);
    try {
      const start = ctxr.peakRss();
      const traffic = await sendHistories(ctxr.url, { totalBytes: TRAFFIC, messageBytes: 2 * MiB, documents: 0 });
      expectAll2xx(traffic);
      expectPeakWithinBudget(ctxr, start, budget, "history", traffic);

      const stats = await ctxr.stats();
      expect(stats.proxy.history_bytes_limit).toBe(budget);
      expect(stats.proxy.history_bytes).toBeLessThanOrEqual(budget);
      expect(stats.proxy.history_budget_evicted_conversations).toBeGreaterThan(0);
      expect(await metric(ctxr, "ctxr_proxy_history_budget_evictions_total")).toBe(stats.proxy.history_budget_evicted_conversations);

      await expectHistoryReplayed(ctxr, upstream);
    } finally {
      await ctxr.stop();
      await upstream.stop();
    }
  }, 60_000);

  // Documents in the messages take the proxy's reorder and dedup paths too: what they keep of a
  // message (block keys, hashes) must not keep the whole message alive once its history is forgotten.
  // (A document's content is a substring of its message; JavaScriptCore substrings keep their whole
  // base string alive, so any cache keyed by the substring pins the message.)
  test("--max-history-bytes: conversations with documents through the proxy", async () => {
    const budget = 16 * MiB;
    const upstream = startTinyUpstream();
    const ctxr = await startCtxr(["--upstream", upstream.url, "--max-history-bytes", budgetFlag(budget)]);
    try {
      const start = ctxr.peakRss();
      // More slack for the transient copies of 2 MB messages with documents (peaks of 320-380 MiB above
      // the start were seen; with messages pinned by a cache, 630-680 MiB). Retention itself is checked
      // exactly, in process, by test/proxy/rewriterMemory.test.ts.
      const traffic = await sendHistories(ctxr.url, { totalBytes: TRAFFIC, messageBytes: 2 * MiB, documents: 8 });
      expectAll2xx(traffic);
      const stats = await ctxr.stats();
      expect(stats.proxy.history_bytes).toBeLessThanOrEqual(budget);
      expect(stats.proxy.history_budget_evicted_conversations).toBeGreaterThan(0);
      expect(stats.index_bytes).toBeLessThanOrEqual(stats.index_bytes_limit);
      expect(stats.dedup_bytes).toBeLessThanOrEqual(stats.dedup_bytes_limit);
      expectPeakWithinBudget(ctxr, start, budget, "history with documents", traffic, 2 * SLACK);

      await expectHistoryReplayed(ctxr, upstream);
    } finally {
      await ctxr.stop();
      await upstream.stop();
    }
  }, 60_000);
});

/** A live conversation's second turn resends its first turn exactly as forwarded (documents reordered and annotated). */
async function expectHistoryReplayed(ctxr: Ctxr, upstream: ReturnType<typeof startTinyUpstream>): Promise<void> {
  const c = client(ctxr.url);
  const documents = ["alpha", "beta", "gamma"].map((name) => `<document id="${name}">\n${name} is a document about ${name}.\n</document>`).join("\n");
  const question = `${documents}\nWhich documents mention beta?`;
  const turn1 = [{ role: "user", content: question }];
  const first = await c.post("/v1/chat/completions", { model: "fake-model", messages: turn1, ctxr: { conversation_id: "live-history" } });
  expect(first.status).toBe(200);
  const forwarded = upstream.lastMessages()[0];
  expect(forwarded).not.toBeNull();
  const turn2 = [...turn1, { role: "assistant", content: "Only beta." }, { role: "user", content: "Are you sure?" }];
  const second = await c.post("/v1/chat/completions", { model: "fake-model", messages: turn2, ctxr: { conversation_id: "live-history" } });
  expect(second.status).toBe(200);
  expect(upstream.lastMessages()[0]).toBe(forwarded!);
}
