/**
 * Hashing: 64-bit wyhash (the keys of routing, prefix events and content blocks) and xxHash64
 * (the checksums of KV cache files), the same values on every runtime, and a reusable SHA-256.
 */
import { bunHashing } from "./bun/hashing.ts";
import { denoHashing } from "./deno/hashing.ts";
import { runtimeName } from "./runtimeName.ts";
import type { Hashing } from "./hashingTypes.ts";
export type { Sha256, Hashing } from "./hashingTypes.ts";

const hashing: Hashing = runtimeName === "bun" ? bunHashing : denoHashing;

export const wyhash = hashing.wyhash;
export const xxHash64 = hashing.xxHash64;
export const createSha256 = hashing.createSha256;
