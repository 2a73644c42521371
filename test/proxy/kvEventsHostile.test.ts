/**
 * A hostile engine publisher against `ctxr serve --upstream URL --kv-events tcp://…` (issue 27,
 * items 7 and 11): the real server in a child process, its peak RSS (VmHWM) and the longest
 * /healthz answer while the publisher sends
 *
 * - 15 MiB payloads that are not msgpack, with consecutive sequence numbers (each was kept whole
 *   for duplicate checks: +15 MB each, 4 GB after 300);
 * - payloads over --kv-events-max-bytes (skipped unread);
 * - one batch of millions of empty maps (+0.9 GB when decoded);
 * - hundreds of thousands of BlockStored with random hashes (the engine-hash map grew without
 *   bound while routing_bytes did not count it);
 * - sequence numbers up to 2^64−1 (refused past 2^53).
 *
 * Thresholds leave room for a loaded CI machine; scripts/bench-hostile.ts measures the figures.
 */
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { startCtxr, startTinyUpstream, MiB, type Ctxr, type TinyUpstream } from "../security/hostileKit.ts";
import { emptyBatchPayload, emptyMapsPayload, HostilePublisher, randomBlockStoredPayload, subscriberStats, undecodablePayload, watchHealthz } from "../security/kvEventsHostileKit.ts";
import { until } from "../helpers/testLifecycle.ts";

setDefaultTimeout(180_000);

/** A /healthz answer slower than this during a probe fails the test (the target, on a quiet machine, is 100 ms). */
const STALL_LIMIT_MS = 500;

let open: { ctxr: Ctxr; upstream: TinyUpstream; publisher: HostilePublisher } | null = null;

afterEach(async () => {
  if (open === null) return;
  await open.ctxr.stop();
  await open.publisher.close();
  await open.upstream.stop();
  open = null;
});

async function followHostilePublisher(args: string[] = []) {
  const publisher = await HostilePublisher.open();
  const upstream = startTinyUpstream();
  const ctxr = await startCtxr(["--upstream", upstream.url, "--kv-events", publisher.endpoint, ...args]);
  open = { ctxr, upstream, publisher };
  await publisher.subscribed();
  return { publisher, ctxr };
}

const malformed = async (ctxr: Ctxr) => ((await subscriberStats(ctxr.url)).subscriber?.malformed ?? {}) as Record<string, number>;

describe("a hostile KV-event publisher against ctxr serve --kv-events", () => {
  test("40 undecodable 15 MiB payloads in sequence: each counted and dropped, memory stays flat", async () => {
    const { publisher, ctxr } = await followHostilePublisher();
    const payload = undecodablePayload(15 * MiB);
    const start = ctxr.rss();
    const healthz = watchHealthz(ctxr.url);
    for (let seq = 0n; seq < 40n; seq++) await publisher.publish(seq, payload);
    await until(async () => (await malformed(ctxr)).msgpack === 40, "40 payloads counted as malformed msgpack", 60_000, 50);
    const stall = await healthz.stop();
    const peak = ctxr.peakRss();
    // Kept whole, 40 payloads were 600 MiB more.
    expect(peak - start).toBeLessThan(300 * MiB);
    expect(stall.failures).toBe(0);
    expect(stall.maxMs).toBeLessThan(STALL_LIMIT_MS);
    const stats = await subscriberStats(ctxr.url);
    expect(stats.subscriber.malformed).toEqual({ msgpack: 40 });
    const metrics = await (await fetch(`${ctxr.url}/metrics`)).text();
    expect(metrics).toMatch(/ctxr_upstream_kv_event_malformed_total\{upstream="[^"]+"\} 40\n/);
  });

  test("payloads over --kv-events-max-bytes are skipped unread and counted as oversized; smaller ones still apply", async () => {
    const { publisher, ctxr } = await followHostilePublisher(["--kv-events-max-bytes", "1MiB"]);
    const start = ctxr.rss();
    for (let seq = 0n; seq < 20n; seq++) await publisher.publish(seq, undecodablePayload(8 * MiB));
    await publisher.publish(20n, emptyBatchPayload());
    await until(async () => (await subscriberStats(ctxr.url)).subscriber.batches === 1, "the valid batch after them", 60_000, 50);
    const stats = await subscriberStats(ctxr.url);
    expect(stats.subscriber.malformed).toEqual({ oversized: 20 });
    expect(stats.subscriber.last_seq).toBe(20);
    expect(ctxr.peakRss() - start).toBeLessThan(150 * MiB);
  });

  test("a batch of 15M empty maps (15 MiB) is refused before decoding, counted as over the limits", async () => {
    const { publisher, ctxr } = await followHostilePublisher();
    const payload = emptyMapsPayload(15_000_000);
    const start = ctxr.rss();
    const healthz = watchHealthz(ctxr.url);
    await publisher.publish(0n, payload);
    await publisher.publish(1n, emptyBatchPayload());
    await until(async () => (await subscriberStats(ctxr.url)).subscriber.batches === 1, "the batch after it", 60_000, 50);
    const stall = await healthz.stop();
    expect(await malformed(ctxr)).toEqual({ limits: 1 });
    // Decoded, it was +0.9 GB.
    expect(ctxr.peakRss() - start).toBeLessThan(200 * MiB);
    expect(stall.maxMs).toBeLessThan(STALL_LIMIT_MS);
  });

  test("300K BlockStored with random hashes: the engine-hash map stays within its share of --max-routing-bytes, and routing_bytes counts it", async () => {
    const budget = 4 * MiB;
    const { publisher, ctxr } = await followHostilePublisher(["--max-routing-bytes", String(budget)]);
    const payloads = Array.from({ length: 30 }, () => randomBlockStoredPayload(10_000));
    const healthz = watchHealthz(ctxr.url);
    for (const [i, payload] of payloads.entries()) await publisher.publish(BigInt(i), payload);
    await until(async () => (await subscriberStats(ctxr.url)).subscriber.batches === 30, "30 batches", 60_000, 50);
    // Received is not yet applied: the mirror takes the batches' keys after the subscriber counts them.
    await until(async () => {
      const applied = await subscriberStats(ctxr.url);
      return applied.blocks + applied.evictedForBytes === 300_000;
    }, "every stored block applied to the mirror", 60_000, 50);
    const stall = await healthz.stop();
    const stats = await subscriberStats(ctxr.url);
    // Half the budget for the mirror: ~9,000 blocks of ~224 bytes.
    expect(stats.bytes).toBeLessThanOrEqual(budget / 2);
    expect(stats.bytes).toBeGreaterThan(budget / 2 - 1024);
    expect(stats.blocks).toBeGreaterThan(5000);
    expect(stats.blocks).toBeLessThan(12_000);
    expect(stats.evictedForBytes).toBe(300_000 - stats.blocks);
    expect(stats.proxy.routing_bytes).toBeGreaterThanOrEqual(stats.bytes);
    expect(stats.proxy.routing_bytes).toBeLessThanOrEqual(budget);
    expect(stats.proxy.routing_bytes_limit).toBe(budget);
    expect(stats.proxy.routing_budget_evicted_mirror_blocks).toBe(stats.evictedForBytes);
    expect(stall.maxMs).toBeLessThan(STALL_LIMIT_MS);
  });

  test("sequence numbers up to 2^64-1 are followed, not refused as malformed", async () => {
    const { publisher, ctxr } = await followHostilePublisher();
    const top = (1n << 64n) - 1n;
    for (const seq of [(1n << 53n) + 1n, top - 2n, top - 1n, top]) await publisher.publish(seq, emptyBatchPayload());
    await until(async () => (await subscriberStats(ctxr.url)).subscriber.batches === 4, "4 batches", 20_000, 50);
    const stats = await subscriberStats(ctxr.url);
    expect(stats.subscriber.malformed).toEqual({});
    expect(stats.subscriber.last_seq).toBe(top.toString());
    // 2^53+1 to 2^64-3 is a gap (no replay socket): one resync, nothing lost since nothing was held.
    expect(stats.subscriber.gaps).toBe(1);
  });
});
