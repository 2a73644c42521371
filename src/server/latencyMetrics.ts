/**
 * The built-in engine's request latency histograms, fed by the scheduler
 * (LatencyObserver) and rendered in /metrics. Names and buckets follow vLLM's
 * (vllm/v1/metrics: `vllm:time_to_first_token_seconds`,
 * `vllm:inter_token_latency_seconds`, `vllm:request_queue_time_seconds`,
 * `vllm:e2e_request_latency_seconds`) with ctxr's prefix, so dashboards carry
 * over by renaming.
 */
import type { LatencyObserver, PromptReuse } from "../engine/schedulerTypes.ts";
import { LabeledCounter, LabeledHistogram } from "../http/prometheus.ts";

/** vLLM's TIME_TO_FIRST_TOKEN_BUCKETS. */
export const TIME_TO_FIRST_TOKEN_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560];
/** vLLM's INTER_TOKEN_LATENCY_BUCKETS. */
export const INTER_TOKEN_LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
/** vLLM's REQUEST_LATENCY_BUCKETS (queue time and end-to-end latency). */
export const REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];

const NO_LABELS = {};
const REUSED = { reuse: "reused" };
const NOT_REUSED = { reuse: "none" };
const CACHED = { kv: "cached" };
const COMPUTED = { kv: "computed" };

/** First tokens of requests that reused cached KV and of those that did not: how many, and their summed TTFT. */
export interface FirstTokenTotals {
  reused: { requests: number; seconds: number };
  not_reused: { requests: number; seconds: number };
  /** Prompt tokens of those requests whose KV came from a cache, and that were computed. */
  prompt_tokens_cached: number;
  prompt_tokens_computed: number;
}

export class LatencyHistograms implements LatencyObserver {
  private readonly ttft = new LabeledHistogram("ctxr_time_to_first_token_seconds", "Time from a request's arrival to its first generated token, in seconds.", TIME_TO_FIRST_TOKEN_BUCKETS);
  private readonly itl = new LabeledHistogram("ctxr_inter_token_latency_seconds", "Time between two consecutive generated tokens of a request, in seconds.", INTER_TOKEN_LATENCY_BUCKETS);
  private readonly queue = new LabeledHistogram("ctxr_request_queue_time_seconds", "Time a request waited before it was first scheduled, in seconds.", REQUEST_LATENCY_BUCKETS);
  private readonly e2e = new LabeledHistogram("ctxr_e2e_request_latency_seconds", "Time from a request's arrival to its last token (finished requests), in seconds.", REQUEST_LATENCY_BUCKETS);
  private readonly ttftByReuse = new LabeledHistogram(
    "ctxr_time_to_first_token_by_reuse_seconds",
    'Time to first token, by whether the prompt reused cached KV (reuse="reused": some prompt tokens came from the prefix or a chunk cache; "none": all were computed).',
    TIME_TO_FIRST_TOKEN_BUCKETS,
  );
  private readonly promptTokens = new LabeledCounter("ctxr_first_token_prompt_tokens_total", 'Prompt tokens of requests that reached their first token, by where their KV came from (kv="cached" or "computed").');
  private readonly all = [this.ttft, this.itl, this.queue, this.e2e, this.ttftByReuse];
  private readonly totals: FirstTokenTotals = { reused: { requests: 0, seconds: 0 }, not_reused: { requests: 0, seconds: 0 }, prompt_tokens_cached: 0, prompt_tokens_computed: 0 };

  constructor() {
    for (const histogram of [this.ttft, this.itl, this.queue, this.e2e]) histogram.start(NO_LABELS);
    this.ttftByReuse.start(REUSED);
    this.ttftByReuse.start(NOT_REUSED);
    this.promptTokens.inc(CACHED, 0);
    this.promptTokens.inc(COMPUTED, 0);
  }

  queued(seconds: number): void {
    this.queue.observe(NO_LABELS, seconds);
  }

  firstToken(seconds: number, prompt: PromptReuse): void {
    this.ttft.observe(NO_LABELS, seconds);
    const reused = prompt.cachedTokens > 0;
    this.ttftByReuse.observe(reused ? REUSED : NOT_REUSED, seconds);
    const totals = reused ? this.totals.reused : this.totals.not_reused;
    totals.requests++;
    totals.seconds += seconds;
    this.promptTokens.inc(CACHED, prompt.cachedTokens);
    this.promptTokens.inc(COMPUTED, prompt.computedTokens);
    this.totals.prompt_tokens_cached += prompt.cachedTokens;
    this.totals.prompt_tokens_computed += prompt.computedTokens;
  }

  /** The same figures as the by-reuse histogram's sums and counts and the prompt-token counter (for /v1/stats). */
  firstTokenTotals(): FirstTokenTotals {
    return { reused: { ...this.totals.reused }, not_reused: { ...this.totals.not_reused }, prompt_tokens_cached: this.totals.prompt_tokens_cached, prompt_tokens_computed: this.totals.prompt_tokens_computed };
  }

  interToken(seconds: number): void {
    this.itl.observe(NO_LABELS, seconds);
  }

  finished(seconds: number): void {
    this.e2e.observe(NO_LABELS, seconds);
  }

  /** Prometheus text of the histograms and the prompt-token counter. */
  metrics(): string {
    return this.all.map((histogram) => histogram.render()).join("") + this.promptTokens.render();
  }
}
