/**
 * Kernels for the context index and KV planning. `kernels()` is the one to use: the WASM
 * implementation, or the TypeScript one when CTXR_KERNELS=ts is set or the module cannot be
 * loaded (a warning is printed once).
 */
import type { IndexKernels } from "./indexKernels.ts";
import { tsKernels } from "./tsKernels.ts";
import { wasmKernels } from "./wasmKernels.ts";

export * from "./indexKernels.ts";
export * from "./kernelTypes.ts";
export { KernelError } from "./validate.ts";
export { tsKernels } from "./tsKernels.ts";
export { kernelModuleBytes, type PrefixTrieArrays, wasmGreedyPrefixTrie, wasmKernelMemoryBytes, wasmKernels } from "./wasmKernels.ts";

let chosen: IndexKernels | undefined;

export function kernels(): IndexKernels {
  if (!chosen) {
    if (process.env.CTXR_KERNELS === "ts") {
      chosen = tsKernels;
    } else {
      try {
        chosen = wasmKernels();
      } catch (error) {
        console.warn(`ctxr: WASM kernels unavailable (${(error as Error).message}); using the TypeScript kernels`);
        chosen = tsKernels;
      }
    }
  }
  return chosen;
}
