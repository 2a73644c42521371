import type { Hashing, Sha256 } from "../hashingTypes.ts";

export const bunHashing: Hashing = {
  wyhash: (data, seed) => BigInt(Bun.hash.wyhash(data, seed)),
  xxHash64: (data) => BigInt(Bun.hash.xxHash64(data)),
  createSha256: () => new Bun.CryptoHasher("sha256") as unknown as Sha256,
};
