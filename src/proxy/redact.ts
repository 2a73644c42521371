/**
 * Keeps secrets (the upstream key, credentials in an upstream URL) out of
 * what ctxr sends back and logs: an upstream that echoes request headers in a
 * body or a header must not leak them to clients.
 *
 * Secrets of any length are redacted, short ones included: an upstream that
 * echoes a 2-character key leaks it as surely as a long one. The price is
 * that every occurrence of a short secret in an answer is replaced too (with
 * the key "k1", "k1" in generated text becomes "[redacted]"), which is why
 * `ctxr serve` warns about secrets shorter than 16 characters: such a key is
 * a misconfiguration, and the replacement keeps JSON and SSE well-formed (it
 * holds no quote, backslash or newline).
 *
 * Every occurrence of every secret is replaced, overlapping ones included
 * (the union of their spans becomes one "[redacted]"). A secret is matched as
 * written and in the forms a JSON encoder may give it (escaped quotes and
 * backslashes, "\/", "\uXXXX" for non-ASCII characters).
 *
 * `StreamRedactor` works on a byte stream chunk by chunk without delaying it:
 * it holds back only a chunk's tail that could be the start of a secret (for
 * SSE chunks, which end in "\n\n", nothing), so relayed chunks stay incremental.
 */
const REDACTED = "[redacted]";
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const REPLACEMENT = Buffer.from(encoder.encode(REDACTED));

/** A secret as written and as JSON encoders may write it inside a string. */
function writtenForms(secret: string): string[] {
  const escaped = JSON.stringify(secret).slice(1, -1);
  const asciiOnly = escaped.replace(/[\u007f-\uffff]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`);
  return [secret, escaped, escaped.replaceAll("/", "\\/"), asciiOnly, asciiOnly.replaceAll("/", "\\/")];
}

/** The strings to redact for these secrets (empty and missing ones dropped; any other length kept, see above). */
export function usableSecrets(secrets: readonly (string | null | undefined)[]): string[] {
  const present = secrets.filter((s): s is string => typeof s === "string" && s.length > 0);
  return [...new Set(present.flatMap(writtenForms))];
}

export function redactText(text: string, secrets: readonly string[]): string {
  if (secrets.length === 0 || !secrets.some((secret) => text.includes(secret))) return text;
  const bytes = Buffer.from(encoder.encode(text));
  return decoder.decode(redactSpans(bytes, secrets.map(toBytes), 0, bytes.length).out);
}

export class StreamRedactor {
  private readonly secrets: Buffer[];
  private carry: Buffer = Buffer.alloc(0);
  /** Bytes at the start of `carry` that belong to a secret whose "[redacted]" was already sent. */
  private covered = 0;

  constructor(secrets: readonly string[]) {
    this.secrets = secrets.filter((s) => s.length > 0).map(toBytes);
  }

  /** The bytes that can be sent now. */
  push(chunk: Uint8Array): Uint8Array {
    const buffer = this.carry.length === 0 ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength) : Buffer.concat([this.carry, chunk]);
    return this.send(buffer, buffer.length - heldBack(buffer, this.secrets));
  }

  /** Whatever was held back, at the end of the stream. */
  flush(): Uint8Array {
    return this.send(this.carry, this.carry.length);
  }

  private send(buffer: Buffer, cut: number): Uint8Array {
    const { out, covered } = redactSpans(buffer, this.secrets, this.covered, cut);
    // Copied: the source chunk's memory may be reused.
    this.carry = cut === buffer.length ? Buffer.alloc(0) : Buffer.from(buffer.subarray(cut));
    this.covered = covered;
    return out;
  }
}

function toBytes(secret: string): Buffer {
  return Buffer.from(encoder.encode(secret));
}

/** Length of the longest tail of `buffer` that is a proper prefix of a secret. */
function heldBack(buffer: Buffer, secrets: readonly Buffer[]): number {
  let longest = 0;
  for (const secret of secrets) {
    for (let k = Math.min(secret.length - 1, buffer.length); k > longest; k--) {
      if (buffer.compare(secret, 0, k, buffer.length - k, buffer.length) === 0) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

interface Span {
  start: number;
  end: number;
  /** Its "[redacted]" was already sent (the rest of a secret cut at the previous chunk's end). */
  sent: boolean;
}

/**
 * `buffer[0, cut)` with every secret's span replaced, where `buffer[0, covered)`
 * is the rest of a span already replaced; and how much of `buffer[cut, …)` is
 * the rest of a span replaced now (a span found whole that crosses the cut).
 */
function redactSpans(buffer: Buffer, secrets: readonly Buffer[], covered: number, cut: number): { out: Uint8Array; covered: number } {
  const found: Span[] = covered > 0 ? [{ start: 0, end: covered, sent: true }] : [];
  for (const secret of secrets) {
    for (let at = buffer.indexOf(secret); at >= 0 && at < cut; at = buffer.indexOf(secret, at + 1)) {
      found.push({ start: at, end: at + secret.length, sent: false });
    }
  }
  if (found.length === 0) return { out: buffer.subarray(0, cut), covered: 0 };
  found.sort((a, b) => a.start - b.start || b.end - a.end);
  // Overlapping spans merge (touching ones stay apart: "[redacted][redacted]").
  const spans: Span[] = [];
  for (const span of found) {
    const last = spans[spans.length - 1];
    if (last !== undefined && span.start < last.end) {
      last.end = Math.max(last.end, span.end);
      last.sent ||= span.sent;
    } else spans.push({ ...span });
  }
  const parts: Buffer[] = [];
  let from = 0;
  let rest = 0;
  for (const span of spans) {
    if (span.start >= cut) {
      // Nothing sent (cut at 0): the rest of the span replaced earlier stays in what is held back.
      if (span.sent) rest = span.end - cut;
      break;
    }
    parts.push(buffer.subarray(from, span.start));
    if (!span.sent) parts.push(REPLACEMENT);
    from = Math.min(span.end, cut);
    if (span.end > cut) {
      rest = span.end - cut;
      break;
    }
  }
  parts.push(buffer.subarray(from, cut));
  return { out: Buffer.concat(parts), covered: rest };
}
