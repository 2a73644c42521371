/**
 * The WASM kernels: loads wasm/ctxr_kernels.wasm (built from wasm/src by
 * scripts/build-wasm.sh) once, lazily and synchronously, and wraps its raw exports.
 *
 * Embedding: the `type: "file"` import makes `bun build --compile` put the module inside the
 * single binary; `wasmPath` is then a path in Bun's embedded file system, which
 * `fs.readFileSync` reads like any other (from source it is the file's real path).
 *
 * Calling convention: inputs are copied into buffers from `ctxr_alloc`, the kernel runs on a
 * whole batch, outputs are copied out, buffers are freed. Memory may grow during any call, so
 * typed-array views of it are made afresh after each call and never kept. When memory has grown
 * past RELEASE_BYTES, the instance is dropped after the call (wasm memory cannot shrink) and the
 * next call instantiates the cached module again. A trap (e.g. out of memory) also drops it.
 */
import { readFileSync } from "node:fs";
import { kernelWasmPath } from "../runtime/embeddedFiles.ts";
import {
  condensedRowStart,
  createKernels,
  distanceSteps,
  type IndexKernels,
  type KernelBackend,
} from "./indexKernels.ts";
import type { EncodedContexts, LinkageMethod, TopPRows } from "./kernelTypes.ts";
import { badScoreError, checkContexts, kendallSegmentError, KernelError } from "./validate.ts";

interface KernelExports {
  memory: WebAssembly.Memory;
  ctxr_alloc(size: number): number;
  ctxr_free(ptr: number, size: number): void;
  ctxr_context_distance_rows(
    flat: number, flatLen: number, offsets: number, n: number, blockCount: number, alpha: number,
    rowStart: number, rowEnd: number, out: number,
  ): number;
  ctxr_context_distance_pairs(
    flat: number, flatLen: number, offsets: number, n: number, blockCount: number, alpha: number,
    pairs: number, pairCount: number, out: number,
  ): number;
  ctxr_linkage(d: number, n: number, method: number, z: number): number;
  ctxr_kendall_tau(a: number, b: number, len: number, offsets: number, segments: number, out: number): number;
  ctxr_top_k_rows(scores: number, rows: number, rowLength: number, k: number, out: number): number;
  ctxr_top_p_rows(scores: number, rows: number, rowLength: number, p: number, outIdx: number, outOffsets: number): number;
  ctxr_greedy_prefix_trie(
    flat: number, flatLen: number, offsets: number, n: number, blockCount: number, lookahead: number,
    ordered: number, parent: number, prefixLength: number, leafOf: number, nodeCount: number,
  ): number;
}

/** Status codes of the raw exports (wasm/src/memory.rs). */
const OK = -1;
const OUT_OF_MEMORY = -2;
/** Drop the instance after a call that left memory larger than this. */
const RELEASE_BYTES = 256 * 1024 * 1024;
/** Largest single buffer wasm32 memory could hold (4 GiB less room for everything else). */
const MAX_BYTES = 2 ** 32 - 2 ** 26;
const LINKAGE_CODES: Record<LinkageMethod, number> = { average: 0, single: 1, complete: 2 };

let compiled: WebAssembly.Module | undefined;
let live: KernelExports | undefined;

/** The module's bytes, as embedded or on disk. */
export function kernelModuleBytes(): Uint8Array {
  return readFileSync(kernelWasmPath());
}

function instance(): KernelExports {
  if (!live) {
    compiled ??= new WebAssembly.Module(kernelModuleBytes());
    live = new WebAssembly.Instance(compiled, {}).exports as unknown as KernelExports;
  }
  return live;
}

type Typed = Int32Array | Uint32Array | Float32Array | Float64Array;

/** The buffers of one kernel call, freed together. */
class Call {
  private readonly blocks: Array<[number, number]> = [];
  constructor(readonly kernel: string, readonly ex: KernelExports) {}

  alloc(bytes: number): number {
    // sizes are wasm32 usize: anything near 4 GiB cannot fit (and must not wrap around)
    if (bytes > MAX_BYTES) throw outOfMemory(this.kernel, bytes);
    const ptr = this.ex.ctxr_alloc(bytes) >>> 0;
    if (ptr === 0) throw outOfMemory(this.kernel, bytes);
    this.blocks.push([ptr, bytes]);
    return ptr;
  }

  copyIn(data: Typed): number {
    const ptr = this.alloc(data.byteLength);
    new Uint8Array(this.ex.memory.buffer, ptr, data.byteLength).set(
      new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    );
    return ptr;
  }

  f64(ptr: number, length: number): Float64Array {
    return new Float64Array(this.ex.memory.buffer, ptr, length);
  }

  u32(ptr: number, length: number): Uint32Array {
    return new Uint32Array(this.ex.memory.buffer, ptr, length);
  }

  i32(ptr: number, length: number): Int32Array {
    return new Int32Array(this.ex.memory.buffer, ptr, length);
  }

  /** Throws for a status other than OK; `bad` explains a non-negative one. */
  status(code: number, bad?: (index: number) => Error): void {
    if (code === OK) return;
    if (code === OUT_OF_MEMORY) throw outOfMemory(this.kernel, 0);
    if (code >= 0 && bad) throw bad(code);
    throw new KernelError(this.kernel, `WASM kernel returned unexpected status ${code}`);
  }

  free(): void {
    for (const [ptr, bytes] of this.blocks) this.ex.ctxr_free(ptr, bytes);
    this.blocks.length = 0;
  }
}

function outOfMemory(kernel: string, bytes: number): KernelError {
  const what = bytes > 0 ? ` (${Math.ceil(bytes / 2 ** 20)} MiB more)` : "";
  return new KernelError(kernel, `out of WASM memory${what}; wasm32 memory is limited to 4 GiB`);
}

/** Runs `body` with a fresh Call; frees its buffers, or drops the instance after a trap. */
function withCall<T>(kernel: string, body: (call: Call) => T): T {
  const call = new Call(kernel, instance());
  let trapped = false;
  try {
    return body(call);
  } catch (error) {
    if (error instanceof WebAssembly.RuntimeError) {
      trapped = true;
      live = undefined;
      throw new KernelError(kernel, `WASM kernel trapped (${error.message}); the module was reset`);
    }
    throw error;
  } finally {
    if (!trapped) {
      call.free();
      if (call.ex.memory.buffer.byteLength > RELEASE_BYTES && live === call.ex) live = undefined;
    }
  }
}

/** Copies the contexts in: [flatPtr, offsetsPtr]. */
function copyContexts(call: Call, contexts: EncodedContexts): [number, number] {
  return [call.copyIn(contexts.flat), call.copyIn(contexts.offsets)];
}

const backend: KernelBackend = {
  name: "wasm",

  distances(contexts, alpha) {
    return withCall("contextDistances", (call) => {
      const n = contexts.offsets.length - 1;
      const count = (n * (n - 1)) / 2;
      const [flat, offsets] = copyContexts(call, contexts);
      const dst = call.alloc(count * 8);
      call.status(call.ex.ctxr_context_distance_rows(
        flat, contexts.flat.length, offsets, n, contexts.blockCount, alpha, 0, n - 1, dst,
      ));
      // slice() (one fresh copy) is cheaper than filling a new zeroed array with set()
      return call.f64(dst, count).slice();
    });
  },

  distanceRows(contexts, alpha, rowStart, rowEnd, out, outOffset) {
    withCall("contextDistances", (call) => {
      const n = contexts.offsets.length - 1;
      const count = condensedRowStart(n, rowEnd) - condensedRowStart(n, rowStart);
      const [flat, offsets] = copyContexts(call, contexts);
      const dst = call.alloc(count * 8);
      call.status(call.ex.ctxr_context_distance_rows(
        flat, contexts.flat.length, offsets, n, contexts.blockCount, alpha, rowStart, rowEnd, dst,
      ));
      out.set(call.f64(dst, count), outOffset);
    });
  },

  distancePairs(contexts, pairs, alpha) {
    return withCall("contextDistancesForPairs", (call) => {
      const n = contexts.offsets.length - 1;
      const count = pairs.length / 2;
      const [flat, offsets] = copyContexts(call, contexts);
      const pairPtr = call.copyIn(pairs);
      const dst = call.alloc(count * 8);
      call.status(call.ex.ctxr_context_distance_pairs(
        flat, contexts.flat.length, offsets, n, contexts.blockCount, alpha, pairPtr, count, dst,
      ));
      return call.f64(dst, count).slice();
    });
  },

  linkage(condensed, n, method) {
    return withCall("linkage", (call) => {
      const d = call.copyIn(condensed);
      const z = call.alloc(4 * (n - 1) * 8);
      call.status(call.ex.ctxr_linkage(d, n, LINKAGE_CODES[method], z));
      return call.f64(z, 4 * (n - 1)).slice();
    });
  },

  contextLinkage(contexts, alpha, method, onProgress) {
    return withCall("contextLinkage", (call) => {
      const n = contexts.offsets.length - 1;
      const total = (n * (n - 1)) / 2;
      const [flat, offsets] = copyContexts(call, contexts);
      const d = call.alloc(total * 8);
      const z = call.alloc(4 * (n - 1) * 8);
      onProgress?.("distances", 0, total);
      for (const [start, end] of distanceSteps(n)) {
        const at = d + condensedRowStart(n, start) * 8;
        call.status(call.ex.ctxr_context_distance_rows(
          flat, contexts.flat.length, offsets, n, contexts.blockCount, alpha, start, end, at,
        ));
        onProgress?.("distances", condensedRowStart(n, end), total);
      }
      onProgress?.("linkage", 0, n - 1);
      call.status(call.ex.ctxr_linkage(d, n, LINKAGE_CODES[method], z));
      onProgress?.("linkage", n - 1, n - 1);
      return call.f64(z, 4 * (n - 1)).slice();
    });
  },

  kendall(a, b, offsets) {
    return withCall("kendallTauDistances", (call) => {
      const segments = offsets.length - 1;
      const pa = call.copyIn(a);
      const pb = call.copyIn(b);
      const po = call.copyIn(offsets);
      const out = call.alloc(segments * 8);
      call.status(
        call.ex.ctxr_kendall_tau(pa, pb, a.length, po, segments, out),
        (s) => kendallSegmentError("kendallTauDistances", s, a, b, offsets),
      );
      return call.f64(out, segments).slice();
    });
  },

  topKRows(scores, rows, rowLength, k) {
    return withCall("topK", (call) => {
      const ps = call.copyIn(scores);
      const out = call.alloc(rows * k * 4);
      call.status(
        call.ex.ctxr_top_k_rows(ps, rows, rowLength, k, out),
        (t) => badScoreError("topK", scores, t, rowLength),
      );
      return call.u32(out, rows * k).slice();
    });
  },

  topPRows(scores, rows, rowLength, p): TopPRows {
    return withCall("topP", (call) => {
      const ps = call.copyIn(scores);
      const outIdx = call.alloc(rows * rowLength * 4);
      const outOffsets = call.alloc((rows + 1) * 4);
      call.status(
        call.ex.ctxr_top_p_rows(ps, rows, rowLength, p, outIdx, outOffsets),
        (t) => badScoreError("topP", scores, t, rowLength),
      );
      const offsets = call.u32(outOffsets, rows + 1).slice();
      const indices = call.u32(outIdx, offsets[rows]!).slice();
      return { indices, offsets };
    });
  },
};

/** The greedy prefix trie as flat arrays (see wasmGreedyPrefixTrie). */
export interface PrefixTrieArrays {
  /** Reordered dense block numbers, same offsets as the input. */
  readonly ordered: Int32Array;
  /** Node -> parent node (-1 for the root, node 0); nodes in creation order. */
  readonly parent: Int32Array;
  /** Node -> length of its prefix from the root. */
  readonly prefixLength: Int32Array;
  /** Context -> its leaf node. */
  readonly leafOf: Int32Array;
}

/**
 * The greedy prefix trie of src/index/greedyPrefixTrie.ts computed by the WASM module
 * (wasm/src/prefix_trie.rs), in one call: identical results to the TypeScript version.
 * `contexts` must hold distinct blocks per context (checked: a KernelError otherwise).
 * `lookahead`: candidates compared one level ahead (0 or 1: plain greedy); an integer.
 */
export function wasmGreedyPrefixTrie(contexts: EncodedContexts, lookahead: number): PrefixTrieArrays {
  const kernel = "greedyPrefixTrie";
  if (!Number.isInteger(lookahead) || lookahead < 0 || lookahead > 0xffffffff) {
    throw new KernelError(kernel, `lookahead must be an integer in 0..2^32-1 (got ${lookahead})`);
  }
  const { flat, offsets, blockCount } = contexts;
  if (!(flat instanceof Int32Array) || !(offsets instanceof Int32Array) || offsets.length < 1 || !Number.isInteger(blockCount) || blockCount < 0) {
    checkContexts(kernel, contexts);
  }
  return withCall(kernel, (call) => {
    const n = offsets.length - 1;
    const maxNodes = 2 * n + 1;
    const pFlat = call.copyIn(flat);
    const pOffsets = call.copyIn(offsets);
    const pOrdered = call.alloc(flat.length * 4);
    const pParent = call.alloc(maxNodes * 4);
    const pPrefix = call.alloc(maxNodes * 4);
    const pLeafOf = call.alloc(n * 4);
    const pNodeCount = call.alloc(4);
    call.status(
      call.ex.ctxr_greedy_prefix_trie(
        pFlat, flat.length, pOffsets, n, blockCount, lookahead, pOrdered, pParent, pPrefix, pLeafOf, pNodeCount,
      ),
      (bad) => {
        checkContexts(kernel, contexts); // throws the precise problem
        return new KernelError(kernel, `context ${bad} is invalid`);
      },
    );
    const nodeCount = call.u32(pNodeCount, 1)[0]!;
    return {
      ordered: call.i32(pOrdered, flat.length).slice(),
      parent: call.i32(pParent, nodeCount).slice(),
      prefixLength: call.i32(pPrefix, nodeCount).slice(),
      leafOf: call.i32(pLeafOf, n).slice(),
    };
  });
}

/** Current size of the module's memory in bytes; 0 when no instance is live. */
export function wasmKernelMemoryBytes(): number {
  return live ? live.memory.buffer.byteLength : 0;
}

let kernelsSingleton: IndexKernels | undefined;

/** The WASM kernels (the module is compiled on first use, synchronously). */
export function wasmKernels(): IndexKernels {
  if (!kernelsSingleton) {
    instance(); // fail here, not in the middle of a caller's work
    kernelsSingleton = createKernels(backend);
  }
  return kernelsSingleton;
}
