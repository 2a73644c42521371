/**
 * What `ctxr serve --model` says about KV-cache managed generation: one information line (the
 * recompute policy and ratio, the chunk-cache tiers) and, at --log-level debug, one line of
 * tuning details (the papers' knobs, the sparse decode trigger's thresholds).
 */
import { DEFAULT_PROPHET_SCORES, DEFAULT_PROPHET_SPAN_DECAY, type ProphetQueryRows, type ProphetScores, type RecomputePolicy } from "../kv/recomputeSelection.ts";
import type { ContextScores } from "../kv/reuseScores.ts";
import { type SparseAnchorOptions, usesNewestKeys } from "../kv/sparseAnchor.ts";
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
  /** What ranks ProphetKV's tokens (default DEFAULT_PROPHET_SCORES). */
  prophetScores?: ProphetScores;
  trigger: UncertaintyTriggerOptions;
  /** --reuse-target-agreement: the ratio follows the audit between min and max (absent: fixed). */
  reuseTarget?: { target: number; minRatio: number; maxRatio: number } | null;
  /** What sparse decode ranks pages against (--sparse-anchor); said when given. */
  sparseAnchor?: SparseAnchorOptions;
}

const GIB = 2 ** 30;
const percent = (ratio: number) => `${+(100 * ratio).toFixed(1)}%`;

function recomputed(s: KvSettings): string {
  const t = s.reuseTarget;
  if (!t) return `${percent(s.recomputeRatio)} recomputed`;
  return `${percent(Math.min(t.maxRatio, Math.max(t.minRatio, s.recomputeRatio)))} recomputed to start, then ${percent(t.minRatio)}–${percent(t.maxRatio)} as set by the target agreement ${t.target}`;
}
const bytes = (n: number) => (n >= GIB ? `${+(n / GIB).toFixed(2)} GiB` : `${+(n / 2 ** 20).toFixed(1)} MiB`);

/**
 * The information line: how documents' KV caches are reused and where they are kept, in plain
 * words (what a user chose or may want to change).
 */
export function describeKvSettings(s: KvSettings): string {
  const tiers = [`${s.deviceBlocks} device blocks`, `${bytes(s.hostBytes)} of host memory`];
  if (s.disk !== null) tiers.push(`disk ${s.disk.dir} (${bytes(s.disk.bytes)})`);
  if (s.remote) tiers.push(`remote ${s.remote.url} (${bytes(s.remote.bytes)})`);
  const reuse = s.policy === "full" ? "recomputed in full (--kv-policy full)" : s.policy === "prefix" ? "reused as a prefix only (--kv-policy prefix)" : `reused at any position (${s.policy}, ${recomputed(s)})`;
  return `documents' KV caches are ${reuse}; chunk cache: ${tiers.join(", ")}`;
}

/**
 * The tuning details behind it (--log-level debug): the paper-specific knobs and the sparse
 * decode trigger's thresholds, stated as values, with where they came from.
 */
export function describeKvTuning(s: KvSettings): string {
  const entropy = s.trigger.entropyThreshold ?? DEFAULT_ENTROPY_THRESHOLD;
  const varentropy = s.trigger.varentropyThreshold ?? DEFAULT_VARENTROPY_THRESHOLD;
  const window = s.trigger.windowSteps ?? DEFAULT_TRIGGER_WINDOW;
  const calibrated = s.trigger.entropyThreshold !== undefined || s.trigger.varentropyThreshold !== undefined;
  return [
    `prophet span decay ${s.prophetSpanDecay ?? DEFAULT_PROPHET_SPAN_DECAY}${(s.prophetQueryRows ?? "all") === "last" ? ", last question token only" : ""}, prophet scores ${s.prophetScores ?? DEFAULT_PROPHET_SCORES}`,
    `cachecraft scores ${s.contextScores ?? "shift"}, focused-chunk early stop ${s.focusWindow > 0 ? `after ${s.focusWindow} stable layers` : "off"}`,
    `sparse-decode trigger: entropy ${entropy} nats, varentropy ${varentropy} nats², window ${window} steps` +
      (calibrated ? " (as given)" : " (the built-in thresholds; ctxr model calibrate-sparse fits them to a model)"),
    ...(s.sparseAnchor === undefined ? [] : [`sparse-decode anchor ${describeAnchor(s.sparseAnchor)}`]),
  ].join("; ");
}

function describeAnchor(anchor: SparseAnchorOptions): string {
  const kind = usesNewestKeys(anchor.kind) ? `${anchor.kind} (${anchor.tokens} token${anchor.tokens === 1 ? "" : "s"})` : anchor.kind;
  const refinement = anchor.refinement;
  if (refinement === undefined) return kind;
  return `${kind}, ${refinement.factor === 0 ? "ranked by mean key" : `best ${refinement.factor} × budget re-ranked by best token, lookback ${refinement.lookback}`}`;
}
