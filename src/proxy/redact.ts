/**
 * Keeps secrets (the upstream key, credentials in an upstream URL) out of
 * what ctxr sends back and logs: an upstream that echoes request headers in a
 * body or a header must not leak them to clients.
 *
 * `StreamRedactor` works on a byte stream chunk by chunk without delaying it:
 * it holds back only a chunk's tail that could be the start of a secret (for
 * SSE chunks, which end in "\n\n", nothing), so relayed chunks stay incremental.
 */
const REDACTED = "[redacted]";
const encoder = new TextEncoder();

/** The secrets worth redacting (empty and very short strings are ignored: they would mangle ordinary text). */
export function usableSecrets(secrets: readonly (string | null | undefined)[]): string[] {
  return [...new Set(secrets.filter((s): s is string => typeof s === "string" && s.length >= 4))];
}

export function redactText(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) if (out.includes(secret)) out = out.replaceAll(secret, REDACTED);
  return out;
}

export class StreamRedactor {
  private readonly secrets: Buffer[];
  private readonly replacement = Buffer.from(encoder.encode(REDACTED));
  private carry: Buffer = Buffer.alloc(0);

  constructor(secrets: readonly string[]) {
    this.secrets = secrets.map((s) => Buffer.from(encoder.encode(s)));
  }

  /** The bytes that can be sent now. */
  push(chunk: Uint8Array): Uint8Array {
    let buffer = this.carry.length === 0 ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength) : Buffer.concat([this.carry, chunk]);
    for (const secret of this.secrets) buffer = replaceAll(buffer, secret, this.replacement);
    const keep = this.heldBack(buffer);
    this.carry = keep === 0 ? Buffer.alloc(0) : Buffer.from(buffer.subarray(buffer.length - keep));
    return keep === 0 ? buffer : buffer.subarray(0, buffer.length - keep);
  }

  /** Whatever was held back, at the end of the stream. */
  flush(): Uint8Array {
    const rest = this.carry;
    this.carry = Buffer.alloc(0);
    return rest;
  }

  /** Length of the longest tail of `buffer` that is a proper prefix of a secret. */
  private heldBack(buffer: Buffer): number {
    let longest = 0;
    for (const secret of this.secrets) {
      for (let k = Math.min(secret.length - 1, buffer.length); k > longest; k--) {
        if (buffer.compare(secret, 0, k, buffer.length - k, buffer.length) === 0) {
          longest = k;
          break;
        }
      }
    }
    return longest;
  }
}

function replaceAll(buffer: Buffer, secret: Buffer, replacement: Buffer): Buffer {
  let at = buffer.indexOf(secret);
  if (at < 0) return buffer;
  const parts: Buffer[] = [];
  let from = 0;
  while (at >= 0) {
    parts.push(buffer.subarray(from, at), replacement);
    from = at + secret.length;
    at = buffer.indexOf(secret, from);
  }
  parts.push(buffer.subarray(from));
  return Buffer.concat(parts);
}
