/**
 * The built-in engine's request latency histograms, fed by the scheduler
 * (LatencyObserver) and rendered in /metrics. Names and buckets follow vLLM's
 * (vllm/v1/metrics: `vllm:time_to_first_token_seconds`,
 * `vllm:inter_token_latency_seconds`, `vllm:request_queue_time_seconds`,
 * `vllm:e2e_request_latency_seconds`) with ctxr's prefix, so dashboards carry
 * over by renaming.
 */
import type { LatencyObserver } from "../engine/schedulerTypes.ts";
import { LabeledHistogram } from "../http/prometheus.ts";

/** vLLM's TIME_TO_FIRST_TOKEN_BUCKETS. */
export const TIME_TO_FIRST_TOKEN_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560];
/** vLLM's INTER_TOKEN_LATENCY_BUCKETS. */
export const INTER_TOKEN_LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
/** vLLM's REQUEST_LATENCY_BUCKETS (queue time and end-to-end latency). */
export const REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];

const NO_LABELS = {};

export class LatencyHistograms implements LatencyObserver {
  private readonly ttft = new LabeledHistogram("ctxr_time_to_first_token_seconds", "Time from a request's arrival to its first generated token, in seconds.", TIME_TO_FIRST_TOKEN_BUCKETS);
  private readonly itl = new LabeledHistogram("ctxr_inter_token_latency_seconds", "Time between two consecutive generated tokens of a request, in seconds.", INTER_TOKEN_LATENCY_BUCKETS);
  private readonly queue = new LabeledHistogram("ctxr_request_queue_time_seconds", "Time a request waited before it was first scheduled, in seconds.", REQUEST_LATENCY_BUCKETS);
  private readonly e2e = new LabeledHistogram("ctxr_e2e_request_latency_seconds", "Time from a request's arrival to its last token (finished requests), in seconds.", REQUEST_LATENCY_BUCKETS);
  private readonly all = [this.ttft, this.itl, this.queue, this.e2e];

  constructor() {
    for (const histogram of this.all) histogram.start(NO_LABELS);
  }

  queued(seconds: number): void {
    this.queue.observe(NO_LABELS, seconds);
  }

  firstToken(seconds: number): void {
    this.ttft.observe(NO_LABELS, seconds);
  }

  interToken(seconds: number): void {
    this.itl.observe(NO_LABELS, seconds);
  }

  finished(seconds: number): void {
    this.e2e.observe(NO_LABELS, seconds);
  }

  /** Prometheus text of the four histograms. */
  metrics(): string {
    return this.all.map((histogram) => histogram.render()).join("");
  }
}
