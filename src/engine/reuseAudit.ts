/**
 * The live quality audit (issue 31, item 4; docs/reuse-audit.md): a share of the requests served
 * with reused chunks under a reuse policy is compared, at the lowest priority, with full prefill
 * of the same prompt (reuseAuditRun.ts). Each comparison is an AgreementSample
 * (quality/answerAgreement.ts) that goes to the figures (reuseAuditFigures.ts: /v1/stats,
 * /metrics, the warning) and to every `onSample` listener (the adaptive ratio of item 5).
 *
 * At serve time an audited request costs one ALLOC and one COPY (the snapshot of its prompt KV)
 * and a copy of its first-token row; the rest is background work of kind "audit".
 */
import type { AgreementSample } from "../quality/answerAgreement.ts";
import type { BlockPair } from "../runner/runnerProtocol.ts";
import { blocksFor, KvBlockTable } from "../kv/kvBlockTable.ts";
import type { BackgroundJob } from "./backgroundWork.ts";
import { AuditFigures, AuditSampler, alertLine, type AuditCellStats } from "./reuseAuditFigures.ts";
import { ReuseAuditRun, type AuditBlocks, type AuditRunner } from "./reuseAuditRun.ts";

/** The background job kind of the audit's pieces. */
export const AUDIT_JOB = "audit";
/** Greedy tokens compared by default (--reuse-audit-tokens). */
export const DEFAULT_AUDIT_TOKENS = 8;
/** The most greedy tokens an audit compares (each is one more FORWARD a side). */
export const MAX_AUDIT_TOKENS = 256;
/** Recent agreement below which a warning is logged by default (--reuse-audit-warn-below). */
export const DEFAULT_AUDIT_WARN_BELOW = 0.9;
/**
 * Audits captured and not finished at once (each holds its prompt KV's snapshot): beyond, a
 * sampled request is dropped (counted), so audits never hold more than this many prompts' blocks.
 */
export const MAX_PENDING_AUDITS = 2;

export interface ReuseAuditSettings {
  /** Share of eligible requests audited, 0..1 (0: off). */
  rate: number;
  /** Greedy tokens compared (≥ 1). */
  tokens?: number;
  /** Recent agreement below which a warning is logged. */
  warnBelow?: number;
  /** The model name samples are labelled with. */
  model: string;
}

export interface ReuseAuditStats {
  rate: number;
  tokens: number;
  warnBelow: number;
  /** Samples taken. */
  audited: number;
  /** Captured, not finished. */
  pending: number;
  /** Sampled requests not audited: no room for the snapshot or the full side, too many pending, background work off, the runner restarted. */
  dropped: number;
  /** Audits that failed (logged). */
  failed: number;
  cells: AuditCellStats[];
}

/** What the runner must do for an audit (RunnerProcess has it; without `copy`, nothing is audited). */
export type ReuseAuditRunner = AuditRunner & { copy?(pairs: readonly BlockPair[]): Promise<void>; readonly info: { kv_groups?: unknown; max_position_embeddings: number } };

/** The served request, as the audit needs it. */
export interface ServedReuse {
  policy: string;
  ratio: number;
  promptTokens: readonly number[];
  /** The served prefill's first-token logits (a copy the audit keeps). */
  row: Float32Array;
  /** The sequence's block table (its prompt KV, not yet decoded past). */
  table: readonly number[];
}

/** Policies whose requests may be audited: every one that reuses chunks at other positions. */
export function auditsPolicy(policy: string): boolean {
  return policy !== "full" && policy !== "prefix";
}

/** A captured audit and the cell its sample goes to. */
interface PendingAudit {
  run: ReuseAuditRun;
  policy: string;
  ratio: number;
}

export class ReuseAudit {
  readonly rate: number;
  readonly tokens: number;
  readonly warnBelow: number;
  private readonly sampler: AuditSampler;
  private readonly figures: AuditFigures;
  private readonly listeners = new Set<(sample: AgreementSample) => void>();
  private readonly queue: PendingAudit[] = [];
  private current: PendingAudit | null = null;
  private audited = 0;
  private dropped = 0;
  private failed = 0;

  constructor(
    private readonly settings: ReuseAuditSettings,
    private readonly runner: ReuseAuditRunner,
    private readonly blocks: AuditBlocks,
    private readonly enqueue: (job: BackgroundJob) => boolean,
    private readonly backgroundEnabled: boolean,
    private readonly prefillChunk: number,
    private readonly log: (line: string) => void = () => {},
  ) {
    this.sampler = new AuditSampler(settings.rate);
    this.rate = settings.rate;
    this.tokens = settings.tokens ?? DEFAULT_AUDIT_TOKENS;
    this.warnBelow = settings.warnBelow ?? DEFAULT_AUDIT_WARN_BELOW;
    if (!(Number.isSafeInteger(this.tokens) && this.tokens >= 1)) throw new RangeError(`the audit's greedy tokens must be a positive integer, got ${this.tokens}`);
    if (!(this.warnBelow >= 0 && this.warnBelow <= 1)) throw new RangeError(`the audit's warning threshold must be from 0 to 1, got ${this.warnBelow}`);
    this.figures = new AuditFigures(this.warnBelow);
  }

  /** Calls `listener` with every sample as it is taken; returns the function that stops it. */
  onSample(listener: (sample: AgreementSample) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** A request served with reused chunks under `policy`: whether to audit it (the sampler's turn). */
  picks(policy: string): boolean {
    return auditsPolicy(policy) && this.sampler.next();
  }

  /**
   * A picked request's reused side is captured (its prompt KV snapshot; `row` must be a copy taken
   * before sampling) and its audit queued. Called before the request's table holds anything past
   * its first token's entry.
   */
  async capture(request: ServedReuse): Promise<void> {
    const snapshot = await this.snapshot(request);
    if (snapshot === null) {
      this.dropped++;
      return;
    }
    const run = new ReuseAuditRun(
      this.runner,
      this.blocks,
      { promptTokens: [...request.promptTokens], reusedRow: request.row, reusedTable: snapshot, tokens: this.tokensFor(request.promptTokens.length), pool: this.blocks.pool },
      this.prefillChunk,
    );
    this.queue.push({ run, policy: request.policy, ratio: request.ratio });
    if (this.current === null) this.startNext();
  }

  /** N, or fewer where the model's context ends first. */
  private tokensFor(promptLength: number): number {
    const max = this.runner.info.max_position_embeddings;
    return max > 0 ? Math.max(1, Math.min(this.tokens, max - promptLength + 1)) : this.tokens;
  }

  /** The served prompt KV copied into a scratch table; null when it cannot be. */
  private async snapshot(request: ServedReuse): Promise<KvBlockTable | null> {
    if (!this.backgroundEnabled || this.runner.copy === undefined || this.runner.info.kv_groups !== undefined) return null;
    if (this.queue.length + (this.current === null ? 0 : 1) >= MAX_PENDING_AUDITS) return null;
    const pool = this.blocks.pool;
    const promptLength = request.promptTokens.length;
    const table = new KvBlockTable(pool.blockSize);
    const entries = ReuseAuditRun.entries(promptLength, this.tokensFor(promptLength));
    const need = table.blocksNeeded(entries);
    await this.blocks.makeScratchRoom(need);
    if (pool.free < need || this.blocks.pool !== pool) return null;
    await pool.grow([{ table, entries }]);
    const filled = blocksFor(promptLength, pool.blockSize);
    await this.runner.copy(Array.from({ length: filled }, (_, i) => ({ src: request.table[i]!, dst: table.blocks[i]! })));
    table.length = promptLength;
    return table;
  }

  private startNext(): void {
    const audit = this.queue.shift();
    this.current = audit ?? null;
    if (audit !== undefined) this.queuePiece(audit);
  }

  private queuePiece(audit: PendingAudit): void {
    const queued = this.enqueue({ kind: AUDIT_JOB, run: () => this.runPiece(audit) });
    if (!queued) void this.finish(audit, "dropped");
  }

  private async runPiece(audit: PendingAudit): Promise<"done" | "dropped"> {
    let outcome;
    try {
      outcome = await audit.run.piece();
    } catch (error) {
      // BackgroundWork logs it and counts the piece as failed.
      await this.finish(audit, "failed");
      throw error;
    }
    if (outcome === "more") this.queuePiece(audit);
    else await this.finish(audit, outcome);
    return outcome === "dropped" ? "dropped" : "done";
  }

  private async finish(audit: PendingAudit, outcome: "done" | "dropped" | "failed"): Promise<void> {
    try {
      if (outcome === "done") this.record(audit);
      else if (outcome === "dropped") this.dropped++;
      else this.failed++;
      await audit.run.release().catch((error) => this.log(`ctxr: reuse audit: freeing its scratch blocks failed: ${(error as Error).message}`));
    } finally {
      if (this.current === audit) this.startNext();
    }
  }

  private record(audit: PendingAudit): void {
    const sample: AgreementSample = { model: this.settings.model, policy: audit.policy, ratio: audit.ratio, ...audit.run.comparison() };
    this.audited++;
    const alert = this.figures.add(sample);
    if (alert !== null) this.log(alertLine(alert, this.warnBelow));
    for (const listener of this.listeners) {
      try {
        listener(sample);
      } catch (error) {
        this.log(`ctxr: reuse audit listener failed: ${(error as Error).message}`);
      }
    }
  }

  get stats(): ReuseAuditStats {
    return {
      rate: this.rate,
      tokens: this.tokens,
      warnBelow: this.warnBelow,
      audited: this.audited,
      pending: this.queue.length + (this.current === null ? 0 : 1),
      dropped: this.dropped,
      failed: this.failed,
      cells: this.figures.all,
    };
  }
}
