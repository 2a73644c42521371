/** Reading a whole file into memory. */
import { bunReadFileBytes } from "./bun/files.ts";
import { denoReadFileBytes } from "./deno/files.ts";
import { runtimeName } from "./runtimeName.ts";

export const readFileBytes: (path: string) => Promise<Uint8Array> = runtimeName === "bun" ? bunReadFileBytes : denoReadFileBytes;
