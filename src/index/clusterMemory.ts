/**
 * What the cluster method needs before it starts: its pairwise distance matrix holds
 * N·(N−1)/2 doubles, so memory grows with the square of the contexts, and the kernels run in
 * wasm32 memory (4 GiB at most). A batch that cannot fit is refused up front, naming the trie
 * method, rather than dying part-way with "out of WASM memory".
 */
import type { ContextSet } from "./contextSet.ts";

/** wasm32 memory holds at most 4 GiB; keep 64 MiB for the module's own data and the allocator. */
export const CLUSTER_MEMORY_LIMIT_BYTES = 2 ** 32 - 2 ** 26;

/** Estimated peak kernel memory of clustering `contexts` contexts of `blocks` blocks in all. */
export function clusterMemoryBytes(contexts: number, blocks: number): number {
  const distances = ((contexts * (contexts - 1)) / 2) * 8;
  const merges = 4 * Math.max(0, contexts - 1) * 8;
  const inputs = (blocks + contexts + 1) * 4;
  const linkageWork = contexts * 64; // the nearest-neighbour chain's per-cluster arrays
  return distances + merges + inputs + linkageWork;
}

/** The most contexts (of `blocksPerContext` blocks each) the cluster method can hold. */
export function clusterContextLimit(blocksPerContext: number, limitBytes = CLUSTER_MEMORY_LIMIT_BYTES): number {
  let low = 1;
  let high = 1 << 20;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (clusterMemoryBytes(mid, mid * blocksPerContext) <= limitBytes) low = mid;
    else high = mid - 1;
  }
  return low;
}

export class ClusterTooLargeError extends Error {
  constructor(
    readonly contexts: number,
    readonly neededBytes: number,
    readonly maxContexts: number,
  ) {
    super(
      `the cluster method cannot hold ${contexts} contexts: its pairwise distance matrix needs about ${formatBytes(neededBytes)}, ` +
        `more than the 4 GiB of WebAssembly memory its kernels have (about ${maxContexts} contexts like these fit); ` +
        `use the trie method (--method trie; auto picks it beyond 2,000 contexts), whose memory grows linearly`,
    );
    this.name = "ClusterTooLargeError";
  }
}

/** Throws ClusterTooLargeError when clustering `set` would not fit. */
export function checkClusterFits(set: ContextSet, limitBytes = CLUSTER_MEMORY_LIMIT_BYTES): void {
  const needed = clusterMemoryBytes(set.size, set.flat.length);
  if (needed <= limitBytes) return;
  const blocksPerContext = set.size === 0 ? 1 : Math.max(1, Math.ceil(set.flat.length / set.size));
  throw new ClusterTooLargeError(set.size, needed, clusterContextLimit(blocksPerContext, limitBytes));
}

function formatBytes(bytes: number): string {
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(1)} GiB`;
  return `${Math.ceil(bytes / 2 ** 20)} MiB`;
}
