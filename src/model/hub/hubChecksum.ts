/**
 * What a downloaded file is checked against. The hub's etag of a file stored with Git LFS (the
 * X-Linked-Etag header, and the listing's lfs.sha256) is the SHA-256 of its bytes; the etag of
 * a file stored in git itself is its git blob id, the SHA-1 of "blob <size>\0" and the bytes.
 */
import { createHash, type Hash } from "node:crypto";
import { open } from "node:fs/promises";

export type FileDigest = { algorithm: "sha256" | "git-sha1"; hex: string };

/** An ETag header's value without W/ and quotes. */
export function unquoteEtag(etag: string): string {
  return etag.trim().replace(/^W\//, "").replace(/^"(.*)"$/, "$1");
}

/** The digest to check: the listing's LFS SHA-256 when given, else what the etag is; null when the etag is neither. */
export function expectedDigest(etag: string | null, lfsSha256: string | null): FileDigest | null {
  if (lfsSha256 !== null && /^[0-9a-f]{64}$/i.test(lfsSha256)) return { algorithm: "sha256", hex: lfsSha256.toLowerCase() };
  if (etag === null) return null;
  const value = unquoteEtag(etag).toLowerCase();
  if (/^[0-9a-f]{64}$/.test(value)) return { algorithm: "sha256", hex: value };
  if (/^[0-9a-f]{40}$/.test(value)) return { algorithm: "git-sha1", hex: value };
  return null;
}

function startHash(algorithm: FileDigest["algorithm"], size: number): Hash {
  if (algorithm === "sha256") return createHash("sha256");
  return createHash("sha1").update(`blob ${size}\0`);
}

/** The digest of a file's bytes, read in chunks (models are large). */
export async function fileDigest(path: string, algorithm: FileDigest["algorithm"]): Promise<string> {
  const handle = await open(path, "r");
  try {
    const size = (await handle.stat()).size;
    const hash = startHash(algorithm, size);
    const buffer = new Uint8Array(4 << 20);
    for (;;) {
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
      if (bytesRead === 0) break;
      hash.update(buffer.subarray(0, bytesRead));
    }
    return hash.digest("hex");
  } finally {
    await handle.close();
  }
}
