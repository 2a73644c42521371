import { createHash, type Hash } from "node:crypto";
import type { Hashing, Sha256 } from "../hashingTypes.ts";
import { wyhash } from "./wyhash.ts";
import { xxHash64 } from "./xxHash64.ts";

const encoder = new TextEncoder();

/** node:crypto's hashes end at their digest; this one starts a fresh one instead. */
class NodeSha256 implements Sha256 {
  private hash: Hash | null = null;

  update(bytes: Uint8Array): void {
    (this.hash ??= createHash("sha256")).update(bytes);
  }

  digest(): Buffer {
    const digest = (this.hash ?? createHash("sha256")).digest();
    this.hash = null;
    return digest;
  }
}

export const denoHashing: Hashing = {
  wyhash: (data, seed) => wyhash(typeof data === "string" ? encoder.encode(data) : data, seed),
  xxHash64: (data) => xxHash64(data),
  createSha256: () => new NodeSha256(),
};
