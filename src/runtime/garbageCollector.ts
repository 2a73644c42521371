/**
 * The garbage collector: a full, synchronous collection, and the live heap's size. Bun exposes
 * both; Deno (V8) collects on request only when started with `--v8-flags=--expose-gc` (otherwise
 * collectGarbage does nothing and the collector runs on its own schedule).
 */
import { bunCollectGarbage, bunHeapBytes } from "./bun/garbageCollector.ts";
import { denoCollectGarbage, denoHeapBytes } from "./deno/garbageCollector.ts";
import { runtimeName } from "./runtimeName.ts";

export const collectGarbage: () => void = runtimeName === "bun" ? bunCollectGarbage : denoCollectGarbage;

/** Bytes of the JavaScript heap in use (JavaScriptCore's heap size on Bun, V8's used heap on Deno). */
export const heapBytes: () => number = runtimeName === "bun" ? bunHeapBytes : denoHeapBytes;
