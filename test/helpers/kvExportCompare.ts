/** Helpers of the runner tests that move a chunk's KV (RELOCATE, EXPORT+IMPORT) and compare exports. */
import { expect } from "bun:test";
import type { KvData } from "../../src/runner/runnerProtocol.ts";

/** n pseudo-random token ids in 4..vocab-1 (the first four are the test vocabularies' specials). */
export function tokens(seed: number, n: number, vocab: number): number[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) >>> 0;
    return 4 + ((x >>> 16) % (vocab - 4));
  });
}

export function range(from: number, count: number): Int32Array {
  return Int32Array.from({ length: count }, (_, i) => from + i);
}

export function maxAbs(a: Float32Array): number {
  let worst = 0;
  for (const x of a) worst = Math.max(worst, Math.abs(x));
  return worst;
}

export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

/** Per layer, the largest K and V difference between two exports, relative to the layer's largest K/V value. */
export function layerErrors(got: KvData, want: KvData): { k: number; v: number }[] {
  return want.layers.map((layer, l) => ({ k: maxAbsDiff(got.layers[l]!.k, layer.k) / maxAbs(layer.k), v: maxAbsDiff(got.layers[l]!.v, layer.v) / maxAbs(layer.v) }));
}
