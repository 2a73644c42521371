/**
 * Authenticated remote-tier entries (--kv-remote-secret): the value in Redis is a magic, an
 * HMAC-SHA256 over the entry's key and file bytes, then the file bytes. The file's own checksum
 * (xxHash64) catches damage, not forgery: anyone who can write to Redis can compute it. With a
 * shared secret only instances that hold it can write an entry the others accept, and binding
 * the key stops a valid entry from being moved under another key. Pure: no I/O.
 */
import { createHmac, timingSafeEqual } from "node:crypto";

const MAGIC = new TextEncoder().encode("CTXRMAC1");
const MAC_BYTES = 32;
/** Bytes an authenticated value adds in front of the file. */
export const MAC_OVERHEAD = MAGIC.length + MAC_BYTES;

function mac(secret: Uint8Array, key: string, file: Uint8Array): Buffer {
  const keyBytes = Buffer.from(key, "utf8");
  const length = Buffer.alloc(4);
  length.writeUInt32BE(keyBytes.length);
  return createHmac("sha256", secret).update(length).update(keyBytes).update(file).digest();
}

/** The value stored under `key` for `file`. */
export function sealRemoteEntry(secret: Uint8Array, key: string, file: Uint8Array): Uint8Array {
  const out = new Uint8Array(MAC_OVERHEAD + file.length);
  out.set(MAGIC, 0);
  out.set(mac(secret, key, file), MAGIC.length);
  out.set(file, MAC_OVERHEAD);
  return out;
}

/** The file bytes of a value read under `key`, or an Error saying why it is not authentic. */
export function openRemoteEntry(secret: Uint8Array, key: string, value: Uint8Array): Uint8Array | Error {
  if (value.length < MAC_OVERHEAD || !MAGIC.every((byte, i) => value[i] === byte)) return new Error("it carries no MAC (written without --kv-remote-secret, or not by ctxr)");
  const file = value.subarray(MAC_OVERHEAD);
  const expected = mac(secret, key, file);
  const given = value.subarray(MAGIC.length, MAC_OVERHEAD);
  if (!timingSafeEqual(expected, given)) return new Error("its MAC does not match (written with another secret, or forged)");
  return file;
}

/** The secret's bytes; refuses secrets too short to resist guessing. */
export function remoteSecretBytes(secret: string, what: string): Uint8Array {
  const bytes = new TextEncoder().encode(secret.trim());
  if (bytes.length < 16) throw new Error(`${what}: the secret must be at least 16 bytes (got ${bytes.length}); e.g. openssl rand -hex 32`);
  return bytes;
}
