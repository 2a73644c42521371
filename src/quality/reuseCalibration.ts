/**
 * `ctxr reuse calibrate`'s measurement, in-process on the real runner: for each request,
 *
 * 1. warm-up: its documents in the warm-up order under `prefix`, stored back with their measured
 *    shift, so every chunk is cached after other neighbours (as the quality benchmark does) and
 *    the measured request reuses them at new positions;
 * 2. the reference: full prefill of the measured prompt, its first token's logits and N greedy
 *    tokens;
 * 3. each policy at each ratio: managedPrefill reusing the cached chunks, its first token's logits
 *    and N greedy tokens, compared with the reference by answerAgreement.ts. A cell stores
 *    nothing (its computed question would be stored and reused by the next cell), so every cell
 *    meets the cache as the warm-up left it.
 *
 * Greedy decoding stops at an end-of-sequence token (which counts as one of the N).
 */
import { ChunkCache } from "../kv/chunkCache.ts";
import { KvBlockPool, KvBlockTable } from "../kv/kvBlockTable.ts";
import { managedPrefill, type ManagedPrefillOptions } from "../kv/managedPrefill.ts";
import type { RecomputePolicy } from "../kv/recomputeSelection.ts";
import { promptTokens, segmentTokens, type SegmentedPrompt } from "../kv/segmentedPrompt.ts";
import type { ModelTokenizer } from "../model/modelTokenizer.ts";
import { RunnerProcess, type RunnerOptions } from "../runner/runnerProcess.ts";
import { sequenceRange } from "../runner/runnerProtocol.ts";
import { argmax, compareFirstToken, compareGreedyTokens } from "./answerAgreement.ts";
import type { CalibrationRequest } from "./calibrationRequests.ts";
import type { RequestOutcome } from "./calibrationStatistics.ts";

/** The policies whose recompute set a ratio sizes. */
export const CALIBRATION_POLICIES: readonly RecomputePolicy[] = ["prophet", "cachecraft", "epic"];

export interface CalibrationCell {
  policy: RecomputePolicy;
  ratio: number;
}

const BLOCK_SIZE = 16;

/** The request's prompt as the server segments completion `segments`: BOS head when the model adds one, a chunk a document, the question. */
export function calibrationPrompt(tokenizer: Pick<ModelTokenizer, "promptIds" | "bosTokenId">, addBos: boolean, request: CalibrationRequest, order: readonly number[]): SegmentedPrompt {
  const head = addBos && tokenizer.bosTokenId !== null ? [tokenizer.bosTokenId] : [];
  return segmentTokens(
    head,
    order.map((d) => tokenizer.promptIds(request.documents[d]!)),
    tokenizer.promptIds(request.question),
  );
}

export class ReuseCalibration {
  private constructor(
    private readonly runner: RunnerProcess,
    private readonly pool: KvBlockPool,
    private readonly stopIds: ReadonlySet<number>,
  ) {}

  static async open(options: Omit<RunnerOptions, "blockSize" | "blocks"> & { blocks: number; stopIds: readonly number[] }): Promise<ReuseCalibration> {
    const runner = await RunnerProcess.start({ ...options, blockSize: BLOCK_SIZE });
    return new ReuseCalibration(runner, new KvBlockPool(runner, BLOCK_SIZE, runner.info.free_blocks), new Set(options.stopIds));
  }

  get maxPositions(): number {
    return this.runner.info.max_position_embeddings;
  }

  /**
   * Blocks one request needs at most: each cached segment's own blocks (a chunk's KV starts a
   * block), and the tables of the warm-up and of the measured prompt with its tokens.
   */
  static blocksFor(prompt: SegmentedPrompt, tokens: number): number {
    const segments = prompt.segments.reduce((n, segment) => n + Math.ceil(segment.tokens.length / BLOCK_SIZE) + 1, 0);
    return segments + 2 * Math.ceil((promptTokens(prompt).length + tokens + 1) / BLOCK_SIZE) + 4;
  }

  private async withTable<T>(entries: number, run: (table: KvBlockTable) => Promise<T>): Promise<T> {
    const table = new KvBlockTable(BLOCK_SIZE);
    await this.pool.grow([{ table, entries }]);
    try {
      return await run(table);
    } finally {
      await this.pool.release([table]);
    }
  }

  /** Greedy tokens after the first token's logits, `tokens` in all (fewer past an end token). */
  private async greedy(table: KvBlockTable, first: Float32Array, start: number, tokens: number): Promise<number[]> {
    const out: number[] = [];
    let logits = first;
    for (let position = start; ; position++) {
      const token = argmax(logits.subarray(0, this.runner.info.vocab));
      out.push(token);
      if (out.length === tokens || this.stopIds.has(token)) return out;
      const step = await this.runner.forward({ sequences: [{ table: table.blocks, tokens: [token], indices: [position], logitRows: [0] }] });
      logits = step.logits[0]!;
    }
  }

  /** One request's outcome in every cell (a fresh chunk cache, so requests do not interfere). */
  async measure(warmup: SegmentedPrompt, prompt: SegmentedPrompt, cells: readonly CalibrationCell[], tokens: number): Promise<RequestOutcome[]> {
    const cache = new ChunkCache(this.runner, { hostBytes: 0 });
    cache.attachPool(this.pool);
    const ids = promptTokens(prompt);
    const entries = ids.length + tokens;
    try {
      await this.withTable(promptTokens(warmup).length, async (table) => {
        const result = await managedPrefill(this.runner, cache, warmup, table.blocks, { policy: "prefix", recomputeRatio: 0, measureShift: true });
        await result.storeBack();
      });
      const full = await this.withTable(entries, async (table) => {
        const out = await this.runner.forward({ sequences: [{ table: table.blocks, tokens: ids, indices: sequenceRange(0, ids.length), logitRows: [ids.length - 1] }] });
        const logits = out.logits[0]!.slice(0, this.runner.info.vocab);
        return { logits, tokens: await this.greedy(table, logits, ids.length, tokens) };
      });
      const outcomes: RequestOutcome[] = [];
      for (const cell of cells) {
        // Nothing stored: a cell's question (computed after the reused chunks) would otherwise be
        // stored as a variant, and the next cell would reuse its KV, computed under this cell's repair.
        const options: ManagedPrefillOptions = { policy: cell.policy, recomputeRatio: cell.ratio, collectMetadata: false };
        outcomes.push(
          await this.withTable(entries, async (table) => {
            const result = await managedPrefill(this.runner, cache, prompt, table.blocks, options);
            await result.storeBack();
            const logits = result.logits.slice(0, this.runner.info.vocab);
            const greedy = compareGreedyTokens(full.tokens, await this.greedy(table, logits, ids.length, tokens));
            const usage = result.usage;
            return { ...compareFirstToken(full.logits, logits), agreement: greedy.agreement, reusedTokens: usage.prompt_tokens_chunk_reused + usage.prompt_tokens_recomputed, recomputedTokens: usage.prompt_tokens_recomputed };
          }),
        );
      }
      return outcomes;
    } finally {
      await cache.reclaim(Number.MAX_SAFE_INTEGER);
    }
  }

  async close(): Promise<void> {
    await this.runner.shutdown();
  }
}
