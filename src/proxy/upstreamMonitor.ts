/**
 * Probes the proxy's upstreams: GET /v1/models tells whether each can serve (what /ready
 * reports), and with --engine auto, the engine's own endpoints tell which engine it is
 * (engineDetection.ts), so the request-id field is right for each. An upstream that comes back
 * after being down is detected again (it may have been replaced by another engine). Every
 * change is logged once, in plain words.
 */
import { DETECTION_PATHS, detectEngine, engineLabel, type DetectionAnswers, type DetectedEngine } from "./engineDetection.ts";
import { requestIdField } from "./engineRequestId.ts";
import type { Upstream, UpstreamPool } from "./upstreamPool.ts";
import { upstreamRequestUrl } from "./upstreamTarget.ts";

export interface UpstreamMonitorOptions {
  /** Between probes of every upstream (null: only when asked, probeAll). */
  intervalMs: number | null;
  /** Detect each upstream's engine (--engine auto). */
  detect: boolean;
  authorizationFor(upstream: Upstream): string | null;
  /** Whether the upstream at this position has its KV events followed (--kv-events). */
  followsKvEvents(position: number): boolean;
  log(text: string): void;
  /** One probe request's time limit (default 2000 ms). */
  timeoutMs?: number;
}

export const DEFAULT_PROBE_INTERVAL_MS = 5000;

export class UpstreamMonitor {
  private timer: ReturnType<typeof setInterval> | null = null;
  private probing: Promise<void> | null = null;

  constructor(
    private readonly pool: UpstreamPool,
    private readonly options: UpstreamMonitorOptions,
  ) {}

  /** Probes now, then every intervalMs. Resolves after the first round. */
  async start(): Promise<void> {
    await this.probeAll();
    if (this.options.intervalMs !== null && this.timer === null) {
      this.timer = setInterval(() => void this.probeAll(), this.options.intervalMs);
      (this.timer as { unref?(): void }).unref?.();
    }
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** One round over every upstream (a round already under way is joined). */
  probeAll(): Promise<void> {
    this.probing ??= Promise.all(this.pool.upstreams.map((upstream) => this.probe(upstream))).then(
      () => void (this.probing = null),
      () => void (this.probing = null),
    );
    return this.probing;
  }

  private async probe(upstream: Upstream): Promise<void> {
    const before = upstream.probe;
    const models = await this.get(upstream, "/v1/models");
    const serving = models.status === 200;
    const reason = serving ? null : models.status === null ? `not reachable (${models.error})` : `GET /v1/models answered ${models.status}`;
    upstream.probe = { serving, reason, at: Date.now() };
    const cameUp = serving && before?.serving !== true;
    if (!serving) {
      if (before === null || before.serving) this.options.log(`ctxr serve: upstream ${upstream.url}: ${reason}; ${this.options.detect ? "its engine is detected when it answers; " : ""}requests go to the other upstreams meanwhile\n`);
      return;
    }
    if (!this.options.detect) {
      if (before !== null) this.options.log(`ctxr serve: upstream ${upstream.url}: serving again\n`);
    } else if (cameUp) {
      const answers: DetectionAnswers = { "/v1/models": models.json };
      await Promise.all(
        DETECTION_PATHS.filter((path) => path !== "/v1/models").map(async (path) => {
          const answer = await this.get(upstream, path);
          if (answer.status === 200) answers[path] = answer.json;
        }),
      );
      const detected = detectEngine(answers);
      upstream.detected = detected;
      upstream.engine = detected.engine;
      this.options.log(`ctxr serve: upstream ${upstream.url}: ${this.describe(upstream, detected)}\n`);
    }
    // Back in rotation at once, rather than after its routing backoff.
    if (cameUp && !upstream.healthy) upstream.markUp();
  }

  private describe(upstream: Upstream, detected: DetectedEngine): string {
    const events = this.options.followsKvEvents(upstream.position) ? "KV-event cache sync on" : "KV-event cache sync off (no --kv-events for it)";
    if (detected.name === null) {
      return `no vLLM, SGLang or llama.cpp endpoints found; treated as ${engineLabel(detected)}: no request-id field; ${events}`;
    }
    const field = requestIdField(detected.engine);
    return `${engineLabel(detected)} detected; ${field === null ? "no request-id field" : `request ids sent as "${field}"`}; ${events}`;
  }

  private get timeoutMs(): number {
    return this.options.timeoutMs ?? 2000;
  }

  private async get(upstream: Upstream, path: string): Promise<{ status: number | null; json: unknown; error: string }> {
    const headers: Record<string, string> = { accept: "application/json" };
    const authorization = this.options.authorizationFor(upstream);
    if (authorization !== null) headers.authorization = authorization;
    try {
      const response = await fetch(upstreamRequestUrl(upstream.target, path, ""), { headers, signal: AbortSignal.timeout(this.timeoutMs), redirect: "manual" });
      let json: unknown;
      try {
        json = response.status === 200 ? await response.json() : (await response.body?.cancel(), undefined);
      } catch {
        json = undefined;
      }
      return { status: response.status, json, error: "" };
    } catch (error) {
      if ((error as Error).name === "TimeoutError") return { status: null, json: undefined, error: `no answer within ${this.timeoutMs / 1000} s` };
      const code = (error as { code?: unknown }).code;
      return { status: null, json: undefined, error: typeof code === "string" ? code : (error as Error).message };
    }
  }
}
