/**
 * Hashing: 64-bit wyhash (the keys of routing, prefix events and content blocks) and xxHash64
 * (the checksums of KV cache files), the same values on every runtime, and a reusable SHA-256.
 */
import { bunHashing } from "./bun/hashing.ts";
import { denoHashing } from "./deno/hashing.ts";
import { runtimeName } from "./runtimeName.ts";

/** SHA-256 over what was given since the last digest (digest starts the next one). */
export interface Sha256 {
  update(bytes: Uint8Array): void;
  digest(): Buffer;
}

export interface Hashing {
  /** Wyhash of the bytes (a string: of its UTF-8), as Bun.hash.wyhash. */
  wyhash(data: string | Uint8Array, seed?: bigint): bigint;
  xxHash64(data: Uint8Array): bigint;
  createSha256(): Sha256;
}

const hashing: Hashing = runtimeName === "bun" ? bunHashing : denoHashing;

export const wyhash = hashing.wyhash;
export const xxHash64 = hashing.xxHash64;
export const createSha256 = hashing.createSha256;
