import { describe, expect, test } from "bun:test";
import { statusFigures } from "../../../src/server/statusPage/statusFigures.ts";

const firstToken = { reused: { requests: 3, seconds: 0.3 }, not_reused: { requests: 1, seconds: 0.5 }, prompt_tokens_cached: 96, prompt_tokens_computed: 140 };
const engineStats = { prompt_tokens: 0, prefix_hit_tokens: 0, engine: { running: 2, waiting: 5, max_waiting: 64, kv_blocks_used: 40, kv_blocks_total: 256, block_size: 16, prefill_tokens: 150, prefix_cache_hit_tokens: 80, first_token: firstToken } };

describe("statusFigures: /v1/stats to the page's figures", () => {
  test("engine: tokens and TTFT from first_token, queue and KV blocks from the engine", () => {
    expect(statusFigures(engineStats)).toEqual({
      mode: "engine",
      cached_tokens: 96,
      computed_tokens: 140,
      ttft_reused: { requests: 3, seconds: 0.3 },
      ttft_not_reused: { requests: 1, seconds: 0.5 },
      queue_depth: 5,
      running: 2,
      kv_blocks_used: 40,
      kv_blocks_total: 256,
      upstreams: [],
      routing_decisions: {},
    });
  });

  test("engine without latency figures: the scheduler's prefix hits and prefill tokens, no TTFT", () => {
    const figures = statusFigures({ ...engineStats, engine: { ...engineStats.engine, first_token: null } });
    expect([figures.cached_tokens, figures.computed_tokens, figures.ttft_reused, figures.ttft_not_reused]).toEqual([80, 150, null, null]);
  });

  test("proxy: sums over the upstreams, computed = forwarded less cached, KV blocks from the mirrors", () => {
    const upstream = (url: string, extra: object) => ({ url, healthy: true, in_flight: 1, requests: 4, prompt_tokens_forwarded: 100, cached_tokens: 30, ...extra });
    const figures = statusFigures({
      prompt_tokens: 999,
      prefix_hit_tokens: 0,
      upstreams: [
        upstream("http://a:8000", { kv_events: { blocks: 12 }, first_token: { reused: { requests: 2, seconds: 0.5 }, not_reused: { requests: 1, seconds: 0.25 }, unknown: { requests: 9, seconds: 9 } } }),
        upstream("http://b:8000", { healthy: false, in_flight: 2, cached_tokens: 150, first_token: { reused: { requests: 3, seconds: 0.25 }, not_reused: { requests: 0, seconds: 0 } } }),
      ],
      proxy: { routing_decisions: { events: 2, estimate: 1, round_robin: 0, events_unavailable: "x" } },
    });
    expect(figures.routing_decisions).toEqual({ events: 2, estimate: 1, round_robin: 0, events_unavailable: 0 });
    expect(figures.mode).toBe("proxy");
    expect(figures.cached_tokens).toBe(180);
    expect(figures.computed_tokens).toBe(70); // 70 + max(0, 100 - 150)
    expect(figures.queue_depth).toBe(3);
    expect(figures.kv_blocks_used).toBe(12);
    // The proxy's TTFT: Σ upstreams' first_token, answers of unknown reuse left out.
    expect(figures.ttft_reused).toEqual({ requests: 5, seconds: 0.75 });
    expect(figures.ttft_not_reused).toEqual({ requests: 1, seconds: 0.25 });
    expect(figures.upstreams).toEqual([
      { url: "http://a:8000", healthy: true, requests: 4, in_flight: 1, cached_tokens: 30, prompt_tokens: 100 },
      { url: "http://b:8000", healthy: false, requests: 4, in_flight: 2, cached_tokens: 150, prompt_tokens: 100 },
    ]);
    expect(statusFigures({ upstreams: [upstream("http://a:8000", {})] }).kv_blocks_used).toBeNull(); // no mirror
    // With the upstreams' usage reports (saved_tokens), computed is in the model's tokens: reported prompt less cached.
    const reported = statusFigures({
      upstreams: [upstream("http://a:8000", {}), upstream("http://b:8000", { cached_tokens: 150 })],
      saved_tokens: { upstreams: [{ prompt_tokens: 400, cached_tokens: 30 }, { prompt_tokens: 120, cached_tokens: 150 }] },
    });
    expect(reported.computed_tokens).toBe(370);
    expect(reported.cached_tokens).toBe(180);
  });

  test("online API alone: the index's estimated prefix hits", () => {
    expect(statusFigures({ prompt_tokens: 1536, prefix_hit_tokens: 512 })).toMatchObject({ mode: "index", cached_tokens: 512, computed_tokens: 1024, queue_depth: null, kv_blocks_used: null, ttft_reused: null });
  });

  test("anything else reads as zeros, never throws", () => {
    for (const junk of [null, undefined, 42, "x", [], { engine: 5 }, { upstreams: [null, 3] }, { prompt_tokens: "many" }]) {
      const figures = statusFigures(junk);
      expect(Number.isFinite(figures.cached_tokens) && Number.isFinite(figures.computed_tokens)).toBe(true);
    }
  });

  test("its source runs on its own (the page ships it to the browser)", () => {
    const shipped = new Function(`return (${statusFigures.toString()})`)() as typeof statusFigures;
    expect(shipped(engineStats)).toEqual(statusFigures(engineStats));
  });
});
