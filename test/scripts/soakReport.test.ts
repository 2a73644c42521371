/** The soak benchmark's figures (scripts/soakReport.ts): quantiles, the tally, the KV check from /metrics. */
import { describe, expect, test } from "bun:test";
import { kvCheck, parseMetrics, quantiles, summaryTable, tally, type RequestRecord } from "../../scripts/soakReport.ts";

const record = (over: Partial<RequestRecord>): RequestRecord => ({ kind: "chat", outcome: "completed", status: 200, expectStatus: 200, ttftMs: null, queueMs: null, ...over });

describe("quantiles", () => {
  test("nearest rank: p50 and p99 of 1..100 are 50 and 99; of one sample, that sample", () => {
    const shuffled = Array.from({ length: 100 }, (_, i) => ((i * 37) % 100) + 1);
    expect(quantiles(shuffled)).toEqual({ n: 100, p50: 50, p99: 99 });
    expect(quantiles([7])).toEqual({ n: 1, p50: 7, p99: 7 });
    expect(quantiles([])).toBeNull();
  });
});

describe("tally", () => {
  test("outcomes, statuses apart, unexpected statuses, TTFT and queue time", () => {
    const t = tally([
      record({ ttftMs: 10, queueMs: 1 }),
      record({ ttftMs: 30 }),
      record({ kind: "hangup_delay", outcome: "hangup", ttftMs: 20 }),
      record({ outcome: "cut", status: null }),
      record({ outcome: "unfinished", status: 200 }),
      record({ outcome: "error_event" }),
      record({ kind: "malformed", outcome: "status", status: 400, expectStatus: 400 }),
      record({ kind: "overlong", outcome: "status", status: 413, expectStatus: 400 }),
      record({ outcome: "status", status: 429 }),
      record({ outcome: "status", status: 503 }),
      record({ kind: "malformed", outcome: "completed", expectStatus: 400 }),
    ]);
    expect(t.all).toMatchObject({ requests: 11, completed: 3, cut: 1, hangup: 1, error_event: 1, unfinished: 1, four_xx: 3, five_xx: 1 });
    expect(t.all.statuses).toEqual({ "200": 6, "400": 1, "413": 1, "429": 1, "503": 1 });
    // 413 for an over-long prompt, 429 and 503 for good requests, 200 for a malformed body.
    expect(t.all.unexpected_status).toBe(4);
    expect(t.byKind.malformed).toMatchObject({ requests: 2, completed: 1, four_xx: 1, unexpected_status: 1 });
    expect(t.ttft).toEqual({ n: 3, p50: 20, p99: 30 });
    expect(t.queue).toEqual({ n: 1, p50: 1, p99: 1 });
    expect(t.queueMissing).toBe(2);
  });
});

describe("kvCheck", () => {
  const metrics = (used: number, prefix: number, chunk: number | null, running = 0) =>
    parseMetrics(
      [
        "# HELP ctxr_generation_kv_blocks_used KV-cache blocks allocated.",
        "# TYPE ctxr_generation_kv_blocks_used gauge",
        `ctxr_generation_kv_blocks_used ${used}`,
        "ctxr_generation_kv_blocks_total 512",
        `ctxr_prefix_cache_blocks ${prefix}`,
        ...(chunk === null ? [] : [`ctxr_kv_device_blocks ${chunk}`]),
        `ctxr_generation_running ${running}`,
        "ctxr_generation_waiting 0",
        'ctxr_http_requests_total{route="/v1/chat/completions"} 5',
      ].join("\n"),
    );

  test("every used block cached and nothing running: ok", () => {
    expect(kvCheck(metrics(300, 280, 20))).toMatchObject({ held_by_requests: 0, ok: true, blocks_total: 512 });
  });

  test("blocks held past the caches, or a request still running: not ok", () => {
    expect(kvCheck(metrics(300, 280, 12))).toMatchObject({ held_by_requests: 8, ok: false });
    expect(kvCheck(metrics(300, 280, 20, 1))).toMatchObject({ held_by_requests: 0, ok: false });
  });

  test("without the chunk cache's figure the split is unknown; without engine figures, null", () => {
    expect(kvCheck(metrics(300, 300, null))).toMatchObject({ chunk_cache_blocks: null, held_by_requests: null, ok: null });
    expect(kvCheck(parseMetrics("ctxr_http_requests_total 4\n"))).toBeNull();
  });

  test("the table says LEAK when blocks are held", () => {
    const summary = { target: "engine", tally: tally([record({})]), peakRss: { engine: 2 ** 20 * 100 }, kv: kvCheck(metrics(300, 280, 12)) };
    expect(summaryTable([summary])).toContain("8 of 512 (LEAK)");
  });
});
