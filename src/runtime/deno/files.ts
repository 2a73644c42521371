import { deno } from "./denoApi.ts";

export function denoReadFileBytes(path: string): Promise<Uint8Array> {
  return deno().readFile(path);
}
