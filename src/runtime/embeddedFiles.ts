/**
 * Files inside the single binary. Only Bun builds one (`bun build --compile`; `deno compile`
 * downloads its runtime, which cannot work offline), so under Deno the program always runs from
 * its source tree: nothing is embedded and files are read from the repository.
 */
import { fileURLToPath } from "node:url";
import { bunEmbeddedFiles, bunIsStandaloneExecutable, bunKernelWasmPath } from "./bun/embeddedFiles.ts";
import { runtimeName } from "./runtimeName.ts";
import type { EmbeddedFile } from "./embeddedFilesTypes.ts";
export type { EmbeddedFile } from "./embeddedFilesTypes.ts";

/** Whether this process is the single binary (not a runtime running the sources). */
export function isStandaloneExecutable(): boolean {
  return runtimeName === "bun" && bunIsStandaloneExecutable();
}

/** The files embedded in the single binary (none when running from source). */
export function embeddedFiles(): readonly EmbeddedFile[] {
  return runtimeName === "bun" ? bunEmbeddedFiles() : [];
}

/**
 * The path of wasm/ctxr_kernels.wasm: inside the single binary, a path in Bun's embedded file
 * system that node:fs reads like any other. Bun needs a `with { type: "file" }` import to embed
 * it, which Deno refuses to parse, so that import lives in a Bun-only file loaded with require()
 * (which Deno never follows).
 */
export function kernelWasmPath(): string {
  if (runtimeName === "bun") return bunKernelWasmPath();
  return fileURLToPath(new URL("../../wasm/ctxr_kernels.wasm", import.meta.url));
}
