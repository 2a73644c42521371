/** The hashing adapter's contract: what both runtimes' implementations provide. */

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
