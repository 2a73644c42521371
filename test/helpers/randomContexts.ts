/** Seeded random workloads for property tests (Zipf-like block popularity). */
import type { BlockId } from "../../src/index/contextSet.ts";
import { seededRandom } from "../../src/index/seededRandom.ts";

export { seededRandom };

export interface RandomContextsOptions {
  contexts: number;
  maxBlocks: number;
  corpus: number;
  /** Use string ids for some blocks. */
  mixedIds?: boolean;
  /** Share of contexts that duplicate an earlier one as a set, reshuffled. */
  duplicateShare?: number;
}

export function randomContexts(seed: number, options: RandomContextsOptions): BlockId[][] {
  const random = seededRandom(seed);
  const weights = Array.from({ length: options.corpus }, (_, r) => 1 / (r + 1));
  const total = weights.reduce((a, b) => a + b, 0);
  const draw = (): number => {
    let u = random() * total;
    for (let r = 0; r < weights.length; r++) {
      u -= weights[r]!;
      if (u <= 0) return r;
    }
    return weights.length - 1;
  };
  const idOf = (r: number): BlockId => (options.mixedIds && r % 3 === 0 ? `doc-${r}` : r);
  const out: BlockId[][] = [];
  for (let i = 0; i < options.contexts; i++) {
    if (out.length > 0 && random() < (options.duplicateShare ?? 0)) {
      const copy = [...out[Math.floor(random() * out.length)]!];
      for (let j = copy.length - 1; j > 0; j--) {
        const k = Math.floor(random() * (j + 1));
        [copy[j], copy[k]] = [copy[k]!, copy[j]!];
      }
      out.push(copy);
      continue;
    }
    const length = 1 + Math.floor(random() * Math.min(options.maxBlocks, options.corpus));
    const seen = new Set<number>();
    const blocks: BlockId[] = [];
    while (blocks.length < length) {
      const r = draw();
      if (seen.has(r)) continue;
      seen.add(r);
      blocks.push(idOf(r));
    }
    out.push(blocks);
  }
  return out;
}
