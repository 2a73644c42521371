/**
 * Every stored chunk variant scored (issue 31, item 1): the measured context shift of a variant,
 * whichever policy stored it, taken by a background job (backgroundWork.ts) in the engine's idle
 * time ("idle", the default), or in the storing request's store-back ("sync"); and the count of
 * reused chunks whose variant had no shift yet, by policy (their choice, and cachecraft's
 * recompute set, fell back to the attention scores).
 *
 * A variant a request reused unscored is measured first: its job goes to the front of the queue
 * (and back into it if it was dropped, e.g. from a full queue), so the next idle time scores the
 * chunks traffic actually reuses before the many stored once and never asked for again.
 */
import type { ChunkCache } from "../kv/chunkCache.ts";
import { scoreVariantShift, type ShiftScoringOutcome, type ShiftScoringRequest, type ShiftScoringRunner } from "../kv/variantShiftScoring.ts";
import type { BackgroundJob } from "./backgroundWork.ts";
import type { ReuseScoringMode } from "./schedulerTypes.ts";

/** The background job kind of a shift measurement (its accounting in /metrics and /v1/stats). */
export const SHIFT_SCORING_JOB = "shift_scoring";

export interface ReuseScoringStats {
  mode: ReuseScoringMode;
  /** Measurements that ended with each outcome (variantShiftScoring.ts). */
  outcomes: Record<ShiftScoringOutcome, number>;
  /** Reused chunks whose variant had no measured shift, by the request's policy. */
  unscoredChunks: Record<string, number>;
  /** Measurements moved to the front of the queue because a request reused their variant unscored. */
  reusedUnscoredQueued: number;
}

export class ReuseScoring {
  private readonly outcomes: Record<ShiftScoringOutcome, number> = { scored: 0, gone: 0, "not-resident": 0, "no-room": 0 };
  private readonly unscored: Record<string, number> = {};
  /** Variants whose measurement waits in the queue, by id, and whether it is at the front already. */
  private readonly queued = new Map<string, { first: boolean }>();
  private requeued = 0;

  constructor(
    readonly mode: ReuseScoringMode,
    /** Without export (a test double), nothing is measured. */
    private readonly runner: Omit<ShiftScoringRunner, "export"> & Partial<Pick<ShiftScoringRunner, "export">>,
    private readonly cache: ChunkCache | null,
    private readonly room: { makeScratchRoom(blocks: number): Promise<void> },
    private readonly enqueue: (job: BackgroundJob, first: boolean) => boolean,
    /** Whether background jobs may run at all (a budget above 0). */
    private readonly backgroundEnabled: boolean,
  ) {}

  /**
   * How a KV-managed prefill with these scores measures the shift of what it stores: "sync" in its
   * store-back, "defer" through `defer`, or "none" (attention scores, which never read it; a model
   * with two KV groups; or a budget of 0 in idle mode).
   */
  measurement(scores: "shift" | "attention"): "sync" | "defer" | "none" {
    if (scores !== "shift" || this.cache === null || this.runner.export === undefined) return "none";
    // Two KV groups (sliding-window layers): no scratch table can hold the head-only pass.
    if (this.runner.info.kv_groups !== undefined) return "none";
    if (this.mode === "sync") return "sync";
    return this.backgroundEnabled ? "defer" : "none";
  }

  /**
   * Queues the measurement of a variant's shift: "stored" at the end of the queue (once per
   * variant); "reused-unscored" (a request met it without one) at the front, unless it is there
   * already. A variant queued twice is measured once: the later job finds the shift in place.
   */
  defer(request: ShiftScoringRequest, reason: "stored" | "reused-unscored" = "stored"): void {
    const cache = this.cache;
    if (cache === null) return;
    const first = reason === "reused-unscored";
    const queued = this.queued.get(request.variantId);
    if (queued !== undefined && (queued.first || !first)) return;
    const accepted = this.enqueue(
      {
        kind: SHIFT_SCORING_JOB,
        run: async () => {
          this.queued.delete(request.variantId);
          const outcome = await scoreVariantShift(this.runner as ShiftScoringRunner, cache, request, (blocks) => this.room.makeScratchRoom(blocks));
          this.outcomes[outcome]++;
          return outcome === "scored" ? "done" : "dropped";
        },
      },
      first,
    );
    if (!accepted) return;
    this.queued.set(request.variantId, { first });
    if (first) this.requeued++;
  }

  /** A request reused `count` chunks whose variant had no shift. */
  countUnscored(policy: string, count: number): void {
    if (count > 0) this.unscored[policy] = (this.unscored[policy] ?? 0) + count;
  }

  get stats(): ReuseScoringStats {
    return { mode: this.mode, outcomes: { ...this.outcomes }, unscoredChunks: { ...this.unscored }, reusedUnscoredQueued: this.requeued };
  }
}
