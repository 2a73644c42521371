/**
 * How much each token of a chunk-cache variant owes to its context: the distance between its KV
 * computed after its prefix (the variant) and computed after the head alone (no other chunk),
 * per token, relative to the token's KV size, summed over layers.
 *
 * Why: Cache-Craft ranks a reused chunk's tokens by their attention mass on the chunks before
 * them (tokenInter). On short records every token spreads its attention over the neighbours,
 * so every token looks "contextualised", and the few tokens whose KV really carries a
 * neighbour's content (a record that copies the value before it) are not told apart (measured
 * in BENCHMARKS.md, issue 12). The KV itself says it directly: a token whose KV barely moves
 * when its prefix is taken away cannot go stale when the prefix changes; one whose KV moves a lot
 * is what a new prefix breaks. Measured once per stored variant, at the cost of one more pass over
 * the chunk's tokens: in the engine's idle time (variantShiftScoring.ts), or in the store-back.
 */
import type { ForwardRequest, ForwardResult, KvData, KvRange, RunnerInfo } from "../runner/runnerProtocol.ts";

/** Σ_l |ΔK|² + |ΔV|² / Σ_l |K_a|² + |V_a|² per token (K before RoPE, so positions do not count). */
export function kvDeviation(a: KvData, b: KvData, width: number): Float64Array {
  const count = a.positions.length;
  if (b.positions.length !== count || a.layers.length !== b.layers.length) throw new RangeError(`kvDeviation: ${count} vs ${b.positions.length} tokens, ${a.layers.length} vs ${b.layers.length} layers`);
  const out = new Float64Array(count);
  for (let t = 0; t < count; t++) {
    let diff = 0;
    let norm = 0;
    for (let l = 0; l < a.layers.length; l++) {
      for (const which of ["k", "v"] as const) {
        const x = a.layers[l]![which];
        const y = b.layers[l]![which];
        for (let i = t * width; i < (t + 1) * width; i++) {
          const d = x[i]! - y[i]!;
          diff += d * d;
          norm += x[i]! * x[i]!;
        }
      }
    }
    out[t] = norm > 0 ? diff / norm : diff;
  }
  return out;
}

/**
 * The chunk's contextualisation from its tokens' shifts (replaces CCI, eq. 11, when shifts are
 * known): the mean of d/(1+d) over its tokens, in [0, 1). So a chunk's weight in the budget
 * split, CFO·|C| = α·(1−β′)·Σ_t d_t/(1+d_t), is the total shift its tokens can lose.
 */
export function shiftContextualization(shift: Float32Array): number {
  if (shift.length === 0) return 0;
  let sum = 0;
  for (const d of shift) sum += d / (1 + d);
  return sum / shift.length;
}

export interface ContextShiftRunner {
  readonly info: RunnerInfo;
  forward(request: ForwardRequest): Promise<ForwardResult>;
  export(range: KvRange): Promise<KvData>;
  relocate(request: { srcTable: readonly number[]; srcStart: number; count: number; dstTable: readonly number[]; dstStart: number; positions: Int32Array }): Promise<void>;
}

/**
 * The per-token shift of the chunk at [chunkStart, chunkStart + tokens.length) of `table`, whose
 * KV is computed there after its prefix, against the same tokens computed right after the head
 * ([0, headLength) of `table`) in `scratch` (a table of at least headLength + tokens.length
 * entries, its content overwritten).
 */
export async function measureContextShift(
  runner: ContextShiftRunner,
  table: readonly number[],
  headLength: number,
  chunkStart: number,
  tokens: readonly number[],
  scratch: readonly number[],
): Promise<Float32Array> {
  const count = tokens.length;
  if (headLength > 0) {
    const positions = Int32Array.from({ length: headLength }, (_, i) => i);
    await runner.relocate({ srcTable: table, srcStart: 0, count: headLength, dstTable: scratch, dstStart: 0, positions });
  }
  const indices = Uint32Array.from({ length: count }, (_, i) => headLength + i);
  await runner.forward({ sequences: [{ table: scratch, tokens: [...tokens], indices, logitRows: [] }] });
  const isolated = await runner.export({ table: scratch, start: headLength, count });
  const inContext = await runner.export({ table, start: chunkStart, count });
  return Float32Array.from(kvDeviation(inContext, isolated, runner.info.kv_heads * runner.info.head_dim));
}
