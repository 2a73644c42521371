/**
 * The one line `ctxr serve --model` prints about KV-cache managed generation: the default
 * recompute policy and ratio, the chunk-cache tiers, focused-chunk early stop, and the sparse
 * decode trigger (flagged when it still has the uncalibrated defaults).
 */
import { DEFAULT_PROPHET_SPAN_DECAY, type ProphetQueryRows, type RecomputePolicy } from "../kv/recomputeSelection.ts";
import type { ContextScores } from "../kv/reuseScores.ts";
import { DEFAULT_ENTROPY_THRESHOLD, DEFAULT_TRIGGER_WINDOW, DEFAULT_VARENTROPY_THRESHOLD, type UncertaintyTriggerOptions } from "../kv/uncertaintyTrigger.ts";

export interface KvSettings {
  policy: RecomputePolicy;
  recomputeRatio: number;
  deviceBlocks: number;
  hostBytes: number;
  disk: { dir: string; bytes: number } | null;
  /** The remote tier (--kv-remote): its URL (no password) and byte limit. */
  remote?: { url: string; bytes: number } | null;
  focusWindow: number;
  /** Cache-Craft's scores (default "shift"). */
  contextScores?: ContextScores;
  /** ProphetKV span decay (default DEFAULT_PROPHET_SPAN_DECAY). */
  prophetSpanDecay?: number;
  /** ProphetKV's scoring rows (default "all"). */
  prophetQueryRows?: ProphetQueryRows;
  trigger: UncertaintyTriggerOptions;
}

const GIB = 2 ** 30;
const bytes = (n: number) => (n >= GIB ? `${+(n / GIB).toFixed(2)} GiB` : `${+(n / 2 ** 20).toFixed(1)} MiB`);

export function describeKvSettings(s: KvSettings): string {
  const entropy = s.trigger.entropyThreshold ?? DEFAULT_ENTROPY_THRESHOLD;
  const varentropy = s.trigger.varentropyThreshold ?? DEFAULT_VARENTROPY_THRESHOLD;
  const window = s.trigger.windowSteps ?? DEFAULT_TRIGGER_WINDOW;
  const calibrated = s.trigger.entropyThreshold !== undefined || s.trigger.varentropyThreshold !== undefined;
  return [
    `KV reuse policy ${s.policy} at ${+(100 * s.recomputeRatio).toFixed(1)}% recompute (prophet span decay ${s.prophetSpanDecay ?? DEFAULT_PROPHET_SPAN_DECAY}${(s.prophetQueryRows ?? "all") === "last" ? ", last question token only" : ""})`,
    `chunk cache: ${s.deviceBlocks} device blocks, host ${bytes(s.hostBytes)}, disk ${s.disk === null ? "none" : `${s.disk.dir} (${bytes(s.disk.bytes)})`}` + (s.remote ? `, remote ${s.remote.url} (${bytes(s.remote.bytes)})` : ""),
    `cachecraft scores ${s.contextScores ?? "shift"}, focused-chunk early stop ${s.focusWindow > 0 ? `after ${s.focusWindow} stable layers` : "off"}`,
    `sparse-decode trigger: entropy ${entropy} nats, varentropy ${varentropy} nats², window ${window} steps` +
      (calibrated ? "" : " (uncalibrated defaults: see ctxr model calibrate-sparse)"),
  ].join("; ");
}
