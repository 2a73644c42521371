/**
 * Sparse decode (CHESS) for one sequence: keeps the page vectors of its KV (the
 * runner's KEY_SUMMARY of every full block: mean keys without RoPE over all
 * layers) in step with the sequence, and gives each decode step a compacted
 * block table (SparseDecodePlanner: selected pages, sinks, the local window and
 * the current page), so the step reads only those pages. With a "newest" anchor it also
 * exports the newest tokens' keys (EXPORT) whenever the next step selects pages.
 *
 * On a model with two KV groups (sliding-window layers: Gemma 3, gpt-oss) the pages are the full
 * group's: KEY_SUMMARY, KEY_SCORES and the anchor's EXPORT (`groups: 1`) read the full-attention
 * layers only (the sliding layers' part of every vector is zeros), and a sparse step's FORWARD
 * gives the sliding group its true window (generationForward.ts: `slidingIndices`).
 */
import type { KvData, KvRange, RunnerInfo } from "../runner/runnerProtocol.ts";
import { NO_BLOCK, type KvBlockTable } from "./kvBlockTable.ts";
import { anchorCentered, DEFAULT_SPARSE_ANCHOR_OPTIONS, newestKeysAnchor, type SparseAnchorOptions, usesNewestKeys } from "./sparseAnchor.ts";
import { SparseDecodePlanner } from "./sparseDecodePlanner.ts";
import type { UncertaintyTriggerOptions } from "./uncertaintyTrigger.ts";

/** The runner op sparse decode needs (RunnerProcess has it). */
export interface SparseDecodeRunner {
  keySummary(blocks: readonly number[]): Promise<{ counts: Uint32Array; summaries: Float32Array }>;
  keyScores(blocks: readonly number[], anchor: Float32Array): Promise<Float32Array>;
  export(range: KvRange): Promise<KvData>;
}

export class SparseDecode {
  private readonly planner: SparseDecodePlanner;
  private readonly blockSize: number;
  private readonly dim: number;
  private readonly kvWidth: number;
  private readonly anchor: SparseAnchorOptions;
  /** Two KV groups: the anchor's EXPORT reads the full group's layers only. */
  private readonly twoGroups: boolean;
  /** Full blocks summarised so far. */
  private summarised = 0;
  sparseSteps = 0;
  reconstructions = 0;

  /** `trigger`: the entropy/varentropy thresholds that make it select pages again (calibrate them per model). */
  /** `anchor`: what pages are ranked against (default: the newest token's keys). */
  constructor(info: RunnerInfo, budgetFraction: number, trigger?: UncertaintyTriggerOptions, anchor: SparseAnchorOptions = DEFAULT_SPARSE_ANCHOR_OPTIONS) {
    this.blockSize = info.block_size;
    this.kvWidth = info.kv_heads * info.head_dim;
    this.dim = info.layers * this.kvWidth;
    this.anchor = anchor;
    this.twoGroups = info.kv_groups !== undefined;
    this.planner = new SparseDecodePlanner({
      budgetFraction,
      blockSize: info.block_size,
      anchor: usesNewestKeys(anchor.kind) ? "newest" : "window",
      centered: anchorCentered(anchor.kind),
      ...(anchor.refinement !== undefined ? { refinement: anchor.refinement } : {}),
      ...(trigger !== undefined ? { trigger } : {}),
    });
  }

  /** Summarises the blocks that filled up since the last call; exports the newest keys when the next step selects pages against them. */
  async sync(runner: SparseDecodeRunner, table: KvBlockTable): Promise<void> {
    await this.summarise(runner, table);
    if (this.planner.needsNewestKeys(table.length)) {
      const count = Math.min(this.anchor.tokens, table.length);
      const range = { table: table.blocks, start: table.length - count, count };
      // The sliding group is not read (groups 1): its table need not hold the span.
      const { layers } = await runner.export(this.twoGroups ? { ...range, slidingTable: table.blocks.map(() => NO_BLOCK), groups: 1 } : range);
      this.planner.setNewestKeys(newestKeysAnchor(layers, count, this.kvWidth));
    }
    const request = this.planner.refinementRequest(table.length);
    if (request === undefined || request.pages.length === 0) return;
    const scores = await runner.keyScores(request.pages.map((page) => table.blocks[page]!), request.anchor);
    this.planner.setTokenScores(request.pages, scores, table.length);
  }

  private async summarise(runner: SparseDecodeRunner, table: KvBlockTable): Promise<void> {
    const full = Math.floor(table.length / this.blockSize);
    if (full <= this.summarised) return;
    const blocks = table.blocks.slice(this.summarised, full);
    const { summaries } = await runner.keySummary(blocks);
    if (this.summarised === 0) {
      this.planner.setPages(summaries, blocks.length);
    } else {
      for (let b = 0; b < blocks.length; b++) this.planner.appendPage(summaries.subarray(b * this.dim, (b + 1) * this.dim));
    }
    this.summarised = full;
  }

  /** The table and sequence index for the decode token at sequence index `length`. */
  decodeEntry(fullTable: readonly number[], length: number): { table: readonly number[]; index: number } {
    const entry = this.planner.tableFor(fullTable, length);
    if (entry.table !== fullTable && entry.table.length < fullTable.length) this.sparseSteps++;
    if (entry.reconstructed) this.reconstructions++;
    return { table: entry.table, index: entry.index };
  }

  observe(logits: Float32Array): void {
    this.planner.observeLogits(logits);
  }
}
