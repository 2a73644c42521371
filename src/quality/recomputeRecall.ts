/**
 * Which reused tokens a recompute policy chose vs which ones actually went wrong (issue 12,
 * item 3's recall figure). Per quality example, in-process on the real runner:
 *
 * 1. warm-up: the documents in the warm-up order under `prefix`, stored back, so every chunk
 *    is cached after other neighbours (as the HTTP benchmark does);
 * 2. the oracle: the measured prompt's KV under full prefill, and its KV as `none` leaves it
 *    (the cached chunks re-rotated into place, nothing recomputed). A reused token's deviation
 *    is Σ over layers of |ΔK|² + |ΔV|² (K before RoPE, so positions do not count) divided by
 *    the same sum of the full-prefill K and V: how far its stale KV is from the right one;
 * 3. each policy at each ratio chooses its recompute set (ManagedPrefillResult.recomputed).
 *
 * Figures per cell: recall = |chosen ∩ oracle top-k| / k with k = the policy's budget (the
 * tokens the policy may recompute, the same for both policies), and coverage = the deviation
 * summed over the chosen tokens / summed over the oracle's top k (1 = as good as the oracle).
 * For the dependence family also the share of the referrer record's value tokens ("^^^") that
 * were chosen: the tokens whose KV holds the stale neighbour's value.
 */
import { KvBlockPool, KvBlockTable } from "../kv/kvBlockTable.ts";
import { RunnerProcess } from "../runner/runnerProcess.ts";
import { sequenceRange, type KvData } from "../runner/runnerProtocol.ts";
import { ChunkCache } from "../kv/chunkCache.ts";
import { kvDeviation } from "../kv/contextShift.ts";
import type { ContextScores } from "../kv/reuseScores.ts";
import { DEFAULT_PROPHET_SCORES, type ProphetQueryRows, type ProphetScores } from "../kv/recomputeSelection.ts";
import { managedPrefill, type ManagedPrefillOptions, type ManagedPrefillResult } from "../kv/managedPrefill.ts";
import { promptTokens, segmentBounds, segmentTokens, type SegmentedPrompt } from "../kv/segmentedPrompt.ts";
import { warmupOrder } from "./qualityClient.ts";
import { REFERENCE_MARK, type QualityExample } from "./qualityTasks.ts";

/** The byte-level tokenizer of `ctxr model tiny` (the quality model's): bytes are ids 0..255, BOS is 256. */
const BOS = 256;
const encode = (text: string): number[] => Array.from(new TextEncoder().encode(text));

/** The example's prompt as the server segments it: BOS head, one chunk a document, the question. */
export function examplePrompt(example: QualityExample, order: readonly number[] = example.documents.map((_, d) => d)): SegmentedPrompt {
  return segmentTokens(
    [BOS],
    order.map((d) => encode(example.documents[d]!)),
    encode(example.question),
  );
}

/** The `k` candidate positions of highest deviation (ties to the lower position). */
export function oracleTop(deviation: Float64Array, candidates: readonly number[], k: number): number[] {
  return [...candidates].sort((p, q) => deviation[q]! - deviation[p]! || p - q).slice(0, k);
}

/** The policies that choose a recompute set from a ratio. */
export type RecallPolicy = "cachecraft" | "prophet" | "epic";

export const RECALL_POLICIES: readonly RecallPolicy[] = ["cachecraft", "prophet", "epic"];

export interface RecallCell {
  policy: RecallPolicy;
  ratio: number;
  /** prophet's scores (default: the probe's). */
  prophetScores?: ProphetScores;
}

export interface RecallResult {
  cell: RecallCell;
  budget: number;
  /** |chosen ∩ oracle top-budget| / budget. */
  recall: number;
  /** Σ deviation over chosen / Σ over the oracle's top budget. */
  coverage: number;
  /** Dependence: share of the referrer's value tokens chosen (null for other families). */
  referrerValueRecall: number | null;
  /** The first answer token equals full prefill's (greedy). */
  firstTokenAgrees: boolean;
  /** The positions the policy recomputed (ascending). */
  chosen: number[];
}

export interface ExampleRecall {
  /** Reused (chunk-reused, not exact-prefix) token count. */
  reusedTokens: number;
  /** The reused positions ordered by deviation, highest first, with the deviations. */
  oracle: { position: number; deviation: number }[];
  /** Dependence: positions of the referrer's "^^^" (empty for other families). */
  referrerValuePositions: number[];
  /** none's first answer token equals full's. */
  noneAgrees: boolean;
  cells: RecallResult[];
}

const argmax = (logits: Float32Array): number => logits.reduce((best, v, i) => (v > logits[best]! ? i : best), 0);

/** Owns a runner and a chunk cache; measure() one example at a time. */
export class RecomputeRecall {
  private constructor(
    private readonly runner: RunnerProcess,
    private readonly pool: KvBlockPool,
    private readonly blockSize: number,
    private readonly contextScores: ContextScores,
    private readonly prophetSpanDecay: number | undefined,
    private readonly prophetQueryRows: ProphetQueryRows,
    private readonly prophetScores: ProphetScores,
  ) {}

  static async open(options: { executable: string; model: string; threads: number; blocks?: number; contextScores?: ContextScores; prophetSpanDecay?: number; prophetQueryRows?: ProphetQueryRows; prophetScores?: ProphetScores }): Promise<RecomputeRecall> {
    const blockSize = 16;
    const runner = await RunnerProcess.start({ executable: options.executable, model: options.model, blocks: options.blocks ?? 2048, blockSize, threads: options.threads });
    return new RecomputeRecall(runner, new KvBlockPool(runner, blockSize, runner.info.free_blocks), blockSize, options.contextScores ?? "shift", options.prophetSpanDecay, options.prophetQueryRows ?? "all", options.prophetScores ?? DEFAULT_PROPHET_SCORES);
  }

  private get width(): number {
    return this.runner.info.kv_heads * this.runner.info.head_dim;
  }

  private async withTable<T>(prompt: SegmentedPrompt, run: (table: KvBlockTable) => Promise<T>): Promise<T> {
    const table = new KvBlockTable(this.blockSize);
    await this.pool.grow([{ table, entries: promptTokens(prompt).length }]);
    try {
      return await run(table);
    } finally {
      await this.pool.release([table]);
    }
  }

  private async managed(cache: ChunkCache, prompt: SegmentedPrompt, options: ManagedPrefillOptions, exportKv: boolean): Promise<{ result: ManagedPrefillResult; kv: KvData | null }> {
    return this.withTable(prompt, async (table) => {
      const result = await managedPrefill(this.runner, cache, prompt, table.blocks, options);
      await result.storeBack();
      const kv = exportKv ? await this.runner.export({ table: table.blocks, start: 0, count: segmentBounds(prompt).at(-1)! }) : null;
      return { result, kv };
    });
  }

  /** The oracle and every cell's choice for one example (a fresh cache, so other examples do not interfere). */
  async measure(example: QualityExample, cells: readonly RecallCell[]): Promise<ExampleRecall> {
    const cache = new ChunkCache(this.runner, { hostBytes: 0 });
    cache.attachPool(this.pool);
    try {
      const prompt = examplePrompt(example);
      await this.managed(cache, examplePrompt(example, warmupOrder(example)), { policy: "prefix", recomputeRatio: 0, measureShift: this.contextScores === "shift" }, false);
      const contextLength = segmentBounds(prompt).at(-1)!;
      const ids = promptTokens(prompt);
      const full = await this.withTable(prompt, async (table) => {
        const out = await this.runner.forward({ sequences: [{ table: table.blocks, tokens: ids, indices: sequenceRange(0, ids.length), logitRows: [ids.length - 1] }] });
        const kv = await this.runner.export({ table: table.blocks, start: 0, count: contextLength });
        return { kv, first: argmax(out.logits[0]!) };
      });
      const none = await this.managed(cache, prompt, { policy: "none", recomputeRatio: 0 }, true);
      const deviation = kvDeviation(full.kv, none.kv!, this.width);
      const bounds = segmentBounds(prompt);
      // Reused at a new position: everything after the exact-prefix hits (the warm-up cached every chunk).
      const candidates: number[] = [];
      for (let t = none.result.usage.prompt_tokens_prefix_reused; t < contextLength; t++) candidates.push(t);
      const reusedTokens = none.result.usage.prompt_tokens_chunk_reused;
      const referrerValue = referrerValuePositions(example, bounds);
      const results: RecallResult[] = [];
      for (const cell of cells) {
        const { result } = await this.managed(cache, prompt, { policy: cell.policy, recomputeRatio: cell.ratio, contextScores: this.contextScores, ...(this.prophetSpanDecay !== undefined ? { prophetSpanDecay: this.prophetSpanDecay } : {}), prophetQueryRows: this.prophetQueryRows, prophetScores: cell.prophetScores ?? this.prophetScores }, false);
        const chosen = Array.from(result.recomputed);
        const budget = chosen.length;
        const top = new Set(oracleTop(deviation, candidates, budget));
        const hit = chosen.filter((t) => top.has(t)).length;
        const topMass = [...top].reduce((sum, t) => sum + deviation[t]!, 0);
        const chosenMass = chosen.reduce((sum, t) => sum + deviation[t]!, 0);
        results.push({
          cell,
          budget,
          recall: budget > 0 ? hit / budget : 1,
          coverage: topMass > 0 ? chosenMass / topMass : 1,
          referrerValueRecall: referrerValue === null ? null : referrerValue.filter((t) => chosen.includes(t)).length / referrerValue.length,
          firstTokenAgrees: argmax(result.logits) === full.first,
          chosen,
        });
      }
      return {
        reusedTokens,
        oracle: oracleTop(deviation, candidates, candidates.length).map((position) => ({ position, deviation: deviation[position]! })),
        referrerValuePositions: referrerValue ?? [],
        noneAgrees: argmax(none.result.logits) === full.first,
        cells: results,
      };
    } finally {
      await cache.reclaim(Number.MAX_SAFE_INTEGER);
    }
  }

  async close(): Promise<void> {
    await this.runner.shutdown();
  }
}

/** Dependence: the sequence positions of the referrer record's "^^^" in the measured prompt. */
function referrerValuePositions(example: QualityExample, bounds: readonly number[]): number[] | null {
  if (example.referrer === undefined) return null;
  const text = example.documents[example.referrer]!;
  const start = bounds[1 + example.referrer]!;
  const positions: number[] = [];
  const bytes = encode(text);
  const mark = REFERENCE_MARK.charCodeAt(0);
  bytes.forEach((b, i) => {
    if (b === mark) positions.push(start + i);
  });
  return positions;
}
