/**
 * A full, synchronous garbage collection. Bun exposes one; Deno (V8) does only when started with
 * `--v8-flags=--expose-gc`, and otherwise this does nothing (the collector runs on its own schedule).
 */
import { bunCollectGarbage } from "./bun/garbageCollector.ts";
import { denoCollectGarbage } from "./deno/garbageCollector.ts";
import { runtimeName } from "./runtimeName.ts";

export const collectGarbage: () => void = runtimeName === "bun" ? bunCollectGarbage : denoCollectGarbage;
