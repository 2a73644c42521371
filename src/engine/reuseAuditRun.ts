/**
 * One audited request's comparison of its reused KV against full prefill, run as background work
 * in bounded pieces (backgroundWork.ts): each piece is one FORWARD, so a live request that
 * arrives waits at most one of them.
 *
 * - The reused side: the served prefill's first-token logit row (taken when the request was
 *   served), and a snapshot of its prompt KV (its blocks copied into a scratch table after its
 *   first token went out, before it decoded further), from which the next greedy tokens are decoded.
 * - The full side: the same prompt tokens computed from scratch into a second scratch table (in
 *   pieces of at most the scheduler's prefill chunk), its last row the first-token reference, then
 *   greedy decoding from it.
 * - The pieces: the full prefill's parts, then one FORWARD per further greedy token holding both
 *   sides' decode. Both scratch tables are freed at the end (never stored in the chunk cache).
 *
 * The first greedy token of each side is its row's argmax; N tokens take N − 1 decodes a side.
 */
import { argmax, compareFirstToken, compareGreedyTokens, type FirstTokenComparison, type GreedyComparison } from "../quality/answerAgreement.ts";
import type { ForwardRequest, ForwardResult } from "../runner/runnerProtocol.ts";
import { KvBlockTable, type KvBlockPool } from "../kv/kvBlockTable.ts";

export interface AuditRunner {
  forward(request: ForwardRequest): Promise<ForwardResult>;
}

/** What the scheduler's blocks give an audit: the pool (replaced when the runner restarts) and room. */
export interface AuditBlocks {
  readonly pool: KvBlockPool;
  makeScratchRoom(blocks: number): Promise<void>;
}

/** The reused side as captured when the request was served. */
export interface CapturedReuse {
  promptTokens: readonly number[];
  /** The served prefill's first-token logits. */
  reusedRow: Float32Array;
  /** The snapshot of the served prompt KV (entries 0 .. prompt length − 1 written). */
  reusedTable: KvBlockTable;
  /** Greedy tokens to compare (≥ 1; the first is the row's argmax). */
  tokens: number;
  /** The pool the snapshot's blocks belong to. */
  pool: KvBlockPool;
}

export type AuditPieceOutcome = "more" | "done" | "dropped";

export class ReuseAuditRun {
  private fullTable: KvBlockTable | null = null;
  private prefilled = 0;
  private fullRow: Float32Array | null = null;
  private readonly fullTokens: number[] = [];
  private readonly reusedTokens: number[];
  private released = false;

  constructor(
    private readonly runner: AuditRunner,
    private readonly blocks: AuditBlocks,
    readonly captured: CapturedReuse,
    private readonly prefillChunk: number,
  ) {
    this.reusedTokens = [argmax(captured.reusedRow)];
  }

  /** Entries a side's scratch table holds: the prompt and the fed-back greedy tokens but the last. */
  static entries(promptLength: number, tokens: number): number {
    return promptLength + tokens - 1;
  }

  private get promptLength(): number {
    return this.captured.promptTokens.length;
  }

  /** One FORWARD of the audit: "more" while pieces remain, "done" once the comparison is ready, "dropped" when it cannot go on. */
  async piece(): Promise<AuditPieceOutcome> {
    if (this.released) return "dropped";
    // The runner restarted since the snapshot: its blocks are gone (and not ours to free).
    if (this.blocks.pool !== this.captured.pool) {
      this.released = true;
      return "dropped";
    }
    if (this.fullTable === null && !(await this.takeFullTable())) {
      await this.release();
      return "dropped";
    }
    if (this.fullRow === null) await this.prefillPiece();
    else await this.decodePiece();
    return this.fullRow !== null && this.fullTokens.length >= this.captured.tokens ? "done" : "more";
  }

  private async takeFullTable(): Promise<boolean> {
    const table = new KvBlockTable(this.captured.reusedTable.blockSize);
    const entries = ReuseAuditRun.entries(this.promptLength, this.captured.tokens);
    const need = table.blocksNeeded(entries);
    await this.blocks.makeScratchRoom(need);
    if (this.blocks.pool.free < need) return false;
    await this.blocks.pool.grow([{ table, entries }]);
    this.fullTable = table;
    return true;
  }

  private async prefillPiece(): Promise<void> {
    const table = this.fullTable!;
    const start = this.prefilled;
    const count = Math.min(this.prefillChunk, this.promptLength - start);
    const last = start + count === this.promptLength;
    const indices = new Uint32Array(count);
    for (let i = 0; i < count; i++) indices[i] = start + i;
    const result = await this.runner.forward({
      sequences: [{ table: table.blocks, tokens: this.captured.promptTokens.slice(start, start + count), indices, logitRows: last ? [count - 1] : [] }],
    });
    this.prefilled += count;
    table.length = this.prefilled;
    if (last) {
      this.fullRow = Float32Array.from(result.logits[0]!);
      this.fullTokens.push(argmax(this.fullRow));
    }
  }

  private async decodePiece(): Promise<void> {
    const full = this.fullTable!;
    const reused = this.captured.reusedTable;
    const index = this.promptLength + this.fullTokens.length - 1;
    const result = await this.runner.forward({
      sequences: [
        { table: full.blocks, tokens: [this.fullTokens.at(-1)!], indices: [index], logitRows: [0] },
        { table: reused.blocks, tokens: [this.reusedTokens.at(-1)!], indices: [index], logitRows: [0] },
      ],
      greedyRows: true,
    });
    full.length = reused.length = index + 1;
    this.fullTokens.push(result.greedy![0]!.tokens[0]!);
    this.reusedTokens.push(result.greedy![1]!.tokens[0]!);
  }

  /** The figures (after "done"). */
  comparison(): FirstTokenComparison & GreedyComparison {
    if (this.fullRow === null) throw new Error("ReuseAuditRun: the full side is not computed yet");
    return { ...compareFirstToken(this.fullRow, this.captured.reusedRow), ...compareGreedyTokens(this.fullTokens, this.reusedTokens) };
  }

  /** Frees both scratch tables (once; not after a runner restart). */
  async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    if (this.blocks.pool !== this.captured.pool) return;
    const tables = [this.captured.reusedTable, ...(this.fullTable === null ? [] : [this.fullTable])];
    await this.blocks.pool.release(tables);
  }
}
