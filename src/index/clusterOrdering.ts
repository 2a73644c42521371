/**
 * Exact context ordering by hierarchical clustering (ContextPilot Algorithm 4).
 *
 * Pairwise distances (eq. 1) and linkage clustering run in the WASM kernels.
 * Each merge is a node holding the intersection of its children's blocks;
 * top-down, a node's blocks are its parent's (in the parent's order) followed by
 * its own new blocks, and a context is its parent's prefix followed by its other
 * blocks in their original order. New blocks of an internal node are ordered by
 * their summed original positions below it (ties: lower block number), so the
 * retriever's order is disturbed as little as possible.
 * O(N²) time and memory: the distance matrix.
 */
import { kernels, type LinkageMethod } from "../kernels/index.ts";
import type { ContextSet } from "./contextSet.ts";
import { prefixTreeOfSequences } from "./prefixTreeOfSequences.ts";
import { hoistCommonBlocks } from "./hoistCommonBlocks.ts";
import type { OrderedContexts } from "./orderedContexts.ts";

export interface ClusterOrderingOptions {
  alpha: number;
  linkage: LinkageMethod;
  onProgress?: (phase: string, done: number, total: number) => void;
}

export function clusterOrdering(set: ContextSet, options: ClusterOrderingOptions): OrderedContexts {
  const n = set.size;
  const { flat, offsets } = set;
  const ordered = flat.slice();
  if (n < 2) return { ordered, tree: prefixTreeOfSequences(set, ordered) };

  const z = kernels().contextLinkage(
    { flat, offsets, blockCount: set.blockIds.length },
    { alpha: options.alpha, method: options.linkage, onProgress: options.onProgress },
  );

  // Bottom-up: each merge's blocks (intersection) with their position sums.
  const blocksOf: Int32Array[] = new Array(2 * n - 1);
  const positionSumsOf: Float64Array[] = new Array(2 * n - 1);
  const leftOf = new Int32Array(n - 1);
  const rightOf = new Int32Array(n - 1);
  for (let c = 0; c < n; c++) {
    const own = flat.subarray(offsets[c]!, offsets[c + 1]!);
    const byBlock = Array.from(own.keys()).sort((a, b) => own[a]! - own[b]!);
    blocksOf[c] = Int32Array.from(byBlock, (i) => own[i]!);
    positionSumsOf[c] = Float64Array.from(byBlock);
  }
  for (let m = 0; m < n - 1; m++) {
    const a = z[4 * m]!;
    const b = z[4 * m + 1]!;
    leftOf[m] = a;
    rightOf[m] = b;
    [blocksOf[n + m], positionSumsOf[n + m]] = intersect(blocksOf[a]!, positionSumsOf[a]!, blocksOf[b]!, positionSumsOf[b]!);
  }

  // Top-down: prefixes. A node's prefix = parent's prefix + its new blocks by position sum.
  const prefixOf: Int32Array[] = new Array(2 * n - 1);
  const rootId = 2 * n - 2;
  prefixOf[rootId] = orderNewBlocks(new Int32Array(0), blocksOf[rootId]!, positionSumsOf[rootId]!);
  for (let m = n - 2; m >= 0; m--) {
    const parentPrefix = prefixOf[n + m]!;
    for (const child of [leftOf[m]!, rightOf[m]!]) {
      if (child >= n) prefixOf[child] = orderNewBlocks(parentPrefix, blocksOf[child]!, positionSumsOf[child]!);
      else writeLeafOrder(child, parentPrefix);
    }
  }

  function writeLeafOrder(c: number, prefix: Int32Array): void {
    const start = offsets[c]!;
    const end = offsets[c + 1]!;
    const inPrefix = new Set(prefix);
    ordered.set(prefix, start);
    let w = start + prefix.length;
    for (let f = start; f < end; f++) if (!inPrefix.has(flat[f]!)) ordered[w++] = flat[f]!;
  }

  return { ordered, tree: hoistCommonBlocks(set, ordered) };
}

/** Intersection of two block lists sorted by block number, summing position sums. */
function intersect(aBlocks: Int32Array, aSums: Float64Array, bBlocks: Int32Array, bSums: Float64Array): [Int32Array, Float64Array] {
  const blocks: number[] = [];
  const sums: number[] = [];
  let i = 0;
  let j = 0;
  while (i < aBlocks.length && j < bBlocks.length) {
    const a = aBlocks[i]!;
    const b = bBlocks[j]!;
    if (a === b) {
      blocks.push(a);
      sums.push(aSums[i]! + bSums[j]!);
      i++;
      j++;
    } else if (a < b) i++;
    else j++;
  }
  return [Int32Array.from(blocks), Float64Array.from(sums)];
}

function orderNewBlocks(parentPrefix: Int32Array, blocks: Int32Array, positionSums: Float64Array): Int32Array {
  if (blocks.length === parentPrefix.length) return parentPrefix;
  const inParent = new Set(parentPrefix);
  const fresh: number[] = [];
  for (let i = 0; i < blocks.length; i++) if (!inParent.has(blocks[i]!)) fresh.push(i);
  fresh.sort((x, y) => positionSums[x]! - positionSums[y]! || blocks[x]! - blocks[y]!);
  const prefix = new Int32Array(parentPrefix.length + fresh.length);
  prefix.set(parentPrefix);
  for (let i = 0; i < fresh.length; i++) prefix[parentPrefix.length + i] = blocks[fresh[i]!]!;
  return prefix;
}
