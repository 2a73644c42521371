/**
 * Which upstream answers ctxr can read decoded. An answer that is scanned
 * (for usage, or for secrets to redact) is fetched with `decompress: true`,
 * so fetch decodes it as it streams, chunk by chunk. Measured on
 * Bun 1.4: it decodes a single coding among gzip, x-gzip, deflate (zlib or
 * raw), br and zstd, case-insensitively; it leaves a list of codings
 * ("gzip, br") and unknown codings ("compress") as the upstream sent them.
 * Under Deno, fewer (src/runtime/httpClient.ts).
 * test/security/upstreamKey.test.ts checks every coding listed here, so a
 * runtime that stops decoding one fails there rather than leaking.
 */
import { fetchDecodes } from "../runtime/httpClient.ts";

const DECODED_BY_FETCH = fetchDecodes;

/**
 * The Content-Encoding of an answer fetched with `decompress: true` when
 * fetch left it encoded (its body is not readable text), else null.
 */
export function undecodedEncoding(contentEncoding: string | null): string | null {
  if (contentEncoding === null) return null;
  const coding = contentEncoding.trim().toLowerCase();
  return coding === "" || DECODED_BY_FETCH.has(coding) ? null : contentEncoding;
}
