/**
 * The status page's data binding: the one place that knows which /v1/stats fields feed the page.
 * It maps a /v1/stats body (any of the three modes) to the figures the page and its history show;
 * when /v1/stats' fields are renamed, only this file follows.
 *
 * The page runs this same function in the browser (statusPageHtml.ts ships its source), so it must
 * stay self-contained: no imports used at run time, no helpers outside its body.
 */

/** Requests that reached their first token, and their summed time to first token in seconds. */
export interface FirstTokenFigures {
  requests: number;
  seconds: number;
}

export interface UpstreamFigures {
  url: string;
  healthy: boolean;
  requests: number;
  in_flight: number;
  cached_tokens: number;
  prompt_tokens: number;
}

export interface StatusFigures {
  /** engine: `serve --model`; proxy: `serve --upstream`; index: the online reorder API alone. */
  mode: "engine" | "proxy" | "index";
  /** Prompt tokens whose KV came from a cache (engine: prefix or chunk cache; proxy: as the upstreams reported; index: estimated prefix hits). */
  cached_tokens: number;
  /** Prompt tokens computed (engine: run through the model; proxy: the upstreams' reported prompt tokens less cached; index: reordered less estimated hits). */
  computed_tokens: number;
  /**
   * First tokens of requests that reused cached KV and of those that did not (null: not measured in
   * this mode). Proxy: its streamed answers, timed from sending to the first event with a token,
   * "reused" when the upstream reported cached prompt tokens (Σ upstreams' first_token).
   */
  ttft_reused: FirstTokenFigures | null;
  ttft_not_reused: FirstTokenFigures | null;
  /** Engine: requests waiting for admission; proxy: requests in flight at the upstreams. */
  queue_depth: number | null;
  /** Engine: sequences in the running batch. */
  running: number | null;
  /** Engine: its KV blocks; proxy with --kv-events: the blocks the upstreams' mirrors hold. */
  kv_blocks_used: number | null;
  kv_blocks_total: number | null;
  upstreams: UpstreamFigures[];
  /** Proxy: choices among several upstreams, by how they were made (events, estimate, round_robin, events_unavailable). */
  routing_decisions: Record<string, number>;
}

export function statusFigures(stats: unknown): StatusFigures {
  const record = (value: unknown): Record<string, unknown> => (typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {});
  const count = (value: unknown): number => (typeof value === "number" && Number.isFinite(value) ? value : 0);
  const body = record(stats);
  const engine = body.engine === undefined ? null : record(body.engine);
  const upstreamList = Array.isArray(body.upstreams) ? body.upstreams.map(record) : null;

  if (engine !== null) {
    const firstToken = engine.first_token === null || engine.first_token === undefined ? null : record(engine.first_token);
    const ttft = (value: unknown): FirstTokenFigures => ({ requests: count(record(value).requests), seconds: count(record(value).seconds) });
    return {
      mode: "engine",
      cached_tokens: firstToken === null ? count(engine.prefix_cache_hit_tokens) : count(firstToken.prompt_tokens_cached),
      computed_tokens: firstToken === null ? count(engine.prefill_tokens) : count(firstToken.prompt_tokens_computed),
      ttft_reused: firstToken === null ? null : ttft(firstToken.reused),
      ttft_not_reused: firstToken === null ? null : ttft(firstToken.not_reused),
      queue_depth: count(engine.waiting),
      running: count(engine.running),
      kv_blocks_used: count(engine.kv_blocks_used),
      kv_blocks_total: count(engine.kv_blocks_total),
      upstreams: [],
      routing_decisions: {},
    };
  }

  if (upstreamList !== null) {
    const upstreams: UpstreamFigures[] = upstreamList.map((upstream) => ({
      url: typeof upstream.url === "string" ? upstream.url : "",
      healthy: upstream.healthy === true,
      requests: count(upstream.requests),
      in_flight: count(upstream.in_flight),
      cached_tokens: count(upstream.cached_tokens),
      prompt_tokens: count(upstream.prompt_tokens_forwarded),
    }));
    const mirrored = upstreamList.filter((upstream) => upstream.kv_events !== undefined);
    // The proxy's own TTFT (sent to first token) of streamed answers, by what the upstreams reported cached.
    const firstTokens = (bucket: "reused" | "not_reused"): FirstTokenFigures => {
      let requests = 0;
      let seconds = 0;
      for (const upstream of upstreamList) {
        const figures = record(record(upstream.first_token)[bucket]);
        requests += count(figures.requests);
        seconds += count(figures.seconds);
      }
      return { requests, seconds };
    };
    let cached = 0;
    let computed = 0;
    let inFlight = 0;
    // Computed in the model's tokens where the upstreams' usage reports are there (saved_tokens, the
    // same order): the forwarded count is the proxy's own estimate, in another unit than cached_tokens.
    const reports = Array.isArray(record(body.saved_tokens).upstreams) ? (record(body.saved_tokens).upstreams as unknown[]).map(record) : null;
    upstreams.forEach((upstream, i) => {
      cached += upstream.cached_tokens;
      const reported = reports?.[i];
      computed += reported === undefined ? Math.max(0, upstream.prompt_tokens - upstream.cached_tokens) : Math.max(0, count(reported.prompt_tokens) - count(reported.cached_tokens));
      inFlight += upstream.in_flight;
    });
    return {
      mode: "proxy",
      cached_tokens: cached,
      computed_tokens: computed,
      ttft_reused: firstTokens("reused"),
      ttft_not_reused: firstTokens("not_reused"),
      queue_depth: inFlight,
      running: null,
      kv_blocks_used: mirrored.length === 0 ? null : mirrored.reduce((sum, upstream) => sum + count(record(upstream.kv_events).blocks), 0),
      kv_blocks_total: null,
      upstreams,
      routing_decisions: Object.fromEntries(Object.entries(record(record(body.proxy).routing_decisions)).map(([by, value]) => [by, count(value)])),
    };
  }

  const hits = count(body.prefix_hit_tokens);
  return {
    mode: "index",
    cached_tokens: hits,
    computed_tokens: Math.max(0, count(body.prompt_tokens) - hits),
    ttft_reused: null,
    ttft_not_reused: null,
    queue_depth: null,
    running: null,
    kv_blocks_used: null,
    kv_blocks_total: null,
    upstreams: [],
    routing_decisions: {},
  };
}
