/**
 * SciPy-compatible hierarchical clustering, plain TypeScript reference: SciPy's `nn_chain`
 * (scipy/cluster/_hierarchy.pyx) transcribed step for step, then the stable sort by distance and
 * union-find relabelling of `scipy.cluster.hierarchy.linkage`. The WASM twin
 * (wasm/src/linkage.rs) does the same operations, so Z is bit-identical.
 *
 * Tie-breaking (as SciPy): the nearest neighbour of the chain's top is the chain's previous
 * element if it is at the minimal distance, else the lowest-numbered live cluster at that
 * distance; a merge of x < y keeps the new cluster in slot y.
 */
import type { LinkageMethod } from "./kernelTypes.ts";

/** Lance-Williams update for the distance from cluster i to the union of x and y. */
function mergedDistance(method: LinkageMethod, dxi: number, dyi: number, nx: number, ny: number): number {
  if (method === "average") return (nx * dxi + ny * dyi) / (nx + ny);
  if (method === "single") return dxi < dyi ? dxi : dyi;
  return dxi > dyi ? dxi : dyi;
}

/** Clusters n points; `d` (n(n-1)/2 condensed distances) is used as working storage and modified. */
export function linkageInPlace(d: Float64Array, n: number, method: LinkageMethod): Float64Array {
  if (n < 2) return new Float64Array(0);
  const at = (a: number, b: number): number => {
    const i = a < b ? a : b;
    const j = a < b ? b : a;
    return n * i - (i * (i + 1)) / 2 + (j - i - 1);
  };
  const size = new Int32Array(n).fill(1);
  const chain = new Int32Array(n);
  let chainLength = 0;
  const mergeA = new Int32Array(n - 1);
  const mergeB = new Int32Array(n - 1);
  const mergeDistance = new Float64Array(n - 1);

  for (let k = 0; k < n - 1; k++) {
    if (chainLength === 0) {
      chainLength = 1;
      for (let i = 0; i < n; i++) {
        if (size[i]! > 0) {
          chain[0] = i;
          break;
        }
      }
    }
    let x: number;
    let y: number;
    let currentMin: number;
    for (;;) {
      x = chain[chainLength - 1]!;
      if (chainLength > 1) {
        y = chain[chainLength - 2]!;
        currentMin = d[at(x, y)]!;
      } else {
        y = -1;
        currentMin = Infinity;
      }
      for (let i = 0; i < n; i++) {
        if (size[i] === 0 || i === x) continue;
        const dist = d[at(x, i)]!;
        if (dist < currentMin) {
          currentMin = dist;
          y = i;
        }
      }
      if (chainLength > 1 && y === chain[chainLength - 2]) break;
      chain[chainLength++] = y;
    }
    chainLength -= 2;
    if (x > y) [x, y] = [y, x];
    const nx = size[x]!;
    const ny = size[y]!;
    mergeA[k] = x;
    mergeB[k] = y;
    mergeDistance[k] = currentMin;
    size[x] = 0;
    size[y] = nx + ny;
    for (let i = 0; i < n; i++) {
      if (size[i] === 0 || i === y) continue;
      const iy = at(i, y);
      d[iy] = mergedDistance(method, d[at(i, x)]!, d[iy]!, nx, ny);
    }
  }

  // Stable sort of the merges by distance (Array.prototype.sort is stable).
  const order = Array.from({ length: n - 1 }, (_, m) => m);
  order.sort((a, b) => {
    const da = mergeDistance[a]!;
    const db = mergeDistance[b]!;
    return da < db ? -1 : da > db ? 1 : 0;
  });
  // Union-find relabelling: the m-th sorted merge creates cluster n + m.
  const parent = new Int32Array(2 * n - 1).fill(-1);
  const clusterSize = new Float64Array(2 * n - 1).fill(1);
  const find = (v: number): number => {
    let root = v;
    while (parent[root] !== -1) root = parent[root]!;
    while (parent[v] !== -1 && parent[v] !== root) {
      const next = parent[v]!;
      parent[v] = root;
      v = next;
    }
    return root;
  };
  const z = new Float64Array(4 * (n - 1));
  for (let m = 0; m < n - 1; m++) {
    const o = order[m]!;
    const ra = find(mergeA[o]!);
    const rb = find(mergeB[o]!);
    const lo = ra < rb ? ra : rb;
    const hi = ra < rb ? rb : ra;
    const label = n + m;
    parent[lo] = label;
    parent[hi] = label;
    clusterSize[label] = clusterSize[lo]! + clusterSize[hi]!;
    z[4 * m] = lo;
    z[4 * m + 1] = hi;
    z[4 * m + 2] = mergeDistance[o]!;
    z[4 * m + 3] = clusterSize[label]!;
  }
  return z;
}
