/** Argument checks shared by the WASM and TypeScript kernels, with clear messages. */
import type { EncodedContexts, LinkageMethod } from "./kernelTypes.ts";

/** An Error whose message names the kernel and the problem. */
export class KernelError extends Error {
  constructor(kernel: string, problem: string) {
    super(`${kernel}: ${problem}`);
    this.name = "KernelError";
  }
}

function isIndex(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v >= 0;
}

/**
 * offsets: Int32Array starting at 0, non-decreasing, ending at flat.length; blocks in
 * 0..blockCount-1 and distinct within each context.
 */
export function checkContexts(kernel: string, contexts: EncodedContexts): void {
  if (contexts === null || typeof contexts !== "object") throw new KernelError(kernel, "contexts must be an object { flat, offsets, blockCount }");
  const { flat, offsets, blockCount } = contexts;
  if (!(flat instanceof Int32Array)) throw new KernelError(kernel, "contexts.flat must be an Int32Array");
  if (!(offsets instanceof Int32Array)) throw new KernelError(kernel, "contexts.offsets must be an Int32Array");
  if (!isIndex(blockCount)) throw new KernelError(kernel, `contexts.blockCount must be a non-negative integer (got ${blockCount})`);
  if (offsets.length < 1) throw new KernelError(kernel, "contexts.offsets must have at least one entry (number of contexts + 1)");
  if (offsets[0] !== 0) throw new KernelError(kernel, `contexts.offsets[0] must be 0 (got ${offsets[0]})`);
  const n = offsets.length - 1;
  if (offsets[n] !== flat.length) {
    throw new KernelError(kernel, `contexts.offsets[${n}] must equal flat.length ${flat.length} (got ${offsets[n]})`);
  }
  const lastSeenIn = new Int32Array(blockCount).fill(-1);
  for (let i = 0; i < n; i++) {
    const start = offsets[i]!;
    const end = offsets[i + 1]!;
    if (end < start) throw new KernelError(kernel, `contexts.offsets must be non-decreasing (offsets[${i + 1}] = ${end} < ${start})`);
    for (let k = start; k < end; k++) {
      const b = flat[k]!;
      if (b < 0 || b >= blockCount) {
        throw new KernelError(kernel, `context ${i} has block ${b} at position ${k - start}, outside 0..${blockCount - 1} (blockCount ${blockCount})`);
      }
      if (lastSeenIn[b] === i) throw new KernelError(kernel, `context ${i} holds block ${b} twice (blocks must be distinct within a context)`);
      lastSeenIn[b] = i;
    }
  }
}

export function checkAlpha(kernel: string, alpha: number): void {
  if (typeof alpha !== "number" || !Number.isFinite(alpha)) throw new KernelError(kernel, `alpha must be a finite number (got ${alpha})`);
}

export function checkRowRange(kernel: string, n: number, rowStart: number, rowEnd: number, out: Float64Array): void {
  if (!isIndex(rowStart) || !isIndex(rowEnd) || rowStart > rowEnd || rowEnd > n) {
    throw new KernelError(kernel, `need integers 0 <= rowStart <= rowEnd <= ${n} (got rowStart ${rowStart}, rowEnd ${rowEnd})`);
  }
  if (!(out instanceof Float64Array)) throw new KernelError(kernel, "out must be a Float64Array");
  const total = (n * (n - 1)) / 2;
  if (out.length !== total) {
    throw new KernelError(kernel, `out must be the whole condensed matrix: ${total} entries for ${n} contexts (got ${out.length})`);
  }
}

export function checkPairs(kernel: string, pairs: Uint32Array, n: number): void {
  if (!(pairs instanceof Uint32Array)) throw new KernelError(kernel, "pairs must be a Uint32Array (i0, j0, i1, j1, ...)");
  if (pairs.length % 2 !== 0) throw new KernelError(kernel, `pairs must have an even length (got ${pairs.length})`);
  for (let t = 0; t < pairs.length; t++) {
    if (pairs[t]! >= n) {
      throw new KernelError(kernel, `pair ${t >> 1} refers to context ${pairs[t]}, but there are only ${n} contexts`);
    }
  }
}

export function checkLinkageMethod(kernel: string, method: LinkageMethod): void {
  if (method !== "average" && method !== "single" && method !== "complete") {
    throw new KernelError(kernel, `method must be "average", "single" or "complete" (got ${JSON.stringify(method)})`);
  }
}

/** n(n-1)/2 finite distances. */
export function checkCondensed(kernel: string, condensed: Float64Array, n: number): void {
  if (!isIndex(n)) throw new KernelError(kernel, `n must be a non-negative integer (got ${n})`);
  if (!(condensed instanceof Float64Array)) throw new KernelError(kernel, "condensed must be a Float64Array");
  const total = (n * (n - 1)) / 2;
  if (condensed.length !== total) {
    throw new KernelError(kernel, `a condensed matrix of ${n} points has ${total} entries (got ${condensed.length})`);
  }
  for (let t = 0; t < total; t++) {
    if (!Number.isFinite(condensed[t]!)) throw new KernelError(kernel, `condensed[${t}] is ${condensed[t]} (distances must be finite)`);
  }
}

export function checkKendallInput(kernel: string, a: Int32Array, b: Int32Array, offsets: Int32Array): void {
  if (!(a instanceof Int32Array) || !(b instanceof Int32Array)) throw new KernelError(kernel, "a and b must be Int32Arrays");
  if (!(offsets instanceof Int32Array)) throw new KernelError(kernel, "offsets must be an Int32Array");
  if (a.length !== b.length) throw new KernelError(kernel, `a and b must have the same length (got ${a.length} and ${b.length})`);
  if (offsets.length < 1 || offsets[0] !== 0) throw new KernelError(kernel, "offsets must start with 0 (segments + 1 entries)");
  const last = offsets.length - 1;
  if (offsets[last] !== a.length) throw new KernelError(kernel, `offsets[${last}] must equal the length of a and b, ${a.length} (got ${offsets[last]})`);
  for (let s = 0; s < last; s++) {
    if (offsets[s + 1]! < offsets[s]!) throw new KernelError(kernel, `offsets must be non-decreasing (offsets[${s + 1}] = ${offsets[s + 1]} < ${offsets[s]})`);
  }
}

/** Thrown by both backends when segment s of a and b are not orders of the same distinct items. */
export function kendallSegmentError(kernel: string, segment: number, a: Int32Array, b: Int32Array, offsets: Int32Array): KernelError {
  const start = offsets[segment]!;
  const end = offsets[segment + 1]!;
  const show = (v: Int32Array) => {
    const items = Array.from(v.subarray(start, Math.min(end, start + 12)));
    return `[${items.join(", ")}${end - start > 12 ? ", ..." : ""}]`;
  };
  return new KernelError(
    kernel,
    `segment ${segment}: a ${show(a)} and b ${show(b)} must be two orders of the same distinct items`,
  );
}

export function checkK(kernel: string, k: number): void {
  if (!isIndex(k)) throw new KernelError(kernel, `k must be a non-negative integer (got ${k})`);
}

export function checkP(kernel: string, p: number): void {
  if (typeof p !== "number" || Number.isNaN(p)) throw new KernelError(kernel, `p must be a number (got ${p})`);
}

export function checkRowLength(kernel: string, scores: Float32Array, rowLength: number): void {
  if (!(scores instanceof Float32Array)) throw new KernelError(kernel, "scores must be a Float32Array");
  if (!isIndex(rowLength) || rowLength < 1) throw new KernelError(kernel, `rowLength must be a positive integer (got ${rowLength})`);
  if (scores.length % rowLength !== 0) {
    throw new KernelError(kernel, `scores.length ${scores.length} is not a multiple of rowLength ${rowLength}`);
  }
}

/** Thrown by both backends for a score top-k cannot order (NaN) or top-p cannot sum. */
export function badScoreError(kernel: "topK" | "topP", scores: Float32Array, index: number, rowLength: number): KernelError {
  const where = rowLength < scores.length ? ` (row ${Math.floor(index / rowLength)}, column ${index % rowLength})` : "";
  const rule = kernel === "topK" ? "scores must not be NaN" : "scores must be finite and >= 0";
  return new KernelError(kernel, `scores[${index}]${where} is ${scores[index]}; ${rule}`);
}
