import type { EmbeddedFile } from "../embeddedFilesTypes.ts";

export function bunIsStandaloneExecutable(): boolean {
  return Bun.isStandaloneExecutable;
}

export function bunEmbeddedFiles(): readonly EmbeddedFile[] {
  return Bun.embeddedFiles as unknown as EmbeddedFile[];
}

/** Loaded with require() only: its `type: "file"` import is one Deno refuses to parse. */
export function bunKernelWasmPath(): string {
  return (require("./kernelWasmFile.ts") as { default: string }).default;
}
