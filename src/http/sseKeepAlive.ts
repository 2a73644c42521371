/**
 * Keep-alive comments for server-sent event streams.
 *
 * A line that starts with ":" is an SSE comment: clients ignore it (WHATWG HTML, "Parsing an
 * event stream"; the openai SDK's decoder skips it, and a blank line with no data dispatches
 * nothing). Bun.serve closes a connection that writes nothing for its idleTimeout (10 s by
 * default), and proxies in between have idle timeouts of their own, so a stream whose request
 * waits in the engine's queue, prefills a long prompt, or whose upstream pauses, writes a comment
 * whenever it has written nothing for a while.
 *
 * A comment may only start where a line starts: between events it is a whole event of its own
 * (`: keep-alive\n\n`); inside an event (after some of its lines) a single comment line, which
 * neither ends the event nor changes it; in the middle of a line, nothing can be inserted.
 */

/** How long a stream may write nothing before a keep-alive comment (well below Bun's default 10 s idle timeout). */
export const DEFAULT_SSE_KEEP_ALIVE_MS = 4000;

const encoder = new TextEncoder();
/** A comment event, where a new event may start. */
export const KEEP_ALIVE_EVENT = encoder.encode(": keep-alive\n\n");
/** A comment line, inside an event whose earlier lines were written. */
export const KEEP_ALIVE_LINE = encoder.encode(": keep-alive\n");

const LF = 0x0a;

/**
 * Where an SSE byte stream stands after the bytes written so far: at an event boundary (nothing
 * written yet, or the last line was blank), at the start of a line inside an event, or in the
 * middle of a line. A trailing CR counts as mid-line: a LF may follow that belongs to it.
 */
export class SseBoundary {
  /** The last two bytes written (-1: none). */
  private last = -1;
  private beforeLast = -1;

  observe(bytes: Uint8Array): void {
    if (bytes.length >= 2) {
      this.beforeLast = bytes[bytes.length - 2]!;
      this.last = bytes[bytes.length - 1]!;
    } else if (bytes.length === 1) {
      this.beforeLast = this.last;
      this.last = bytes[0]!;
    }
  }

  /** The comment that may be written now without changing any event, or null (mid-line). */
  keepAlive(): Uint8Array | null {
    if (this.last === -1) return KEEP_ALIVE_EVENT;
    if (this.last !== LF) return null;
    // "\n\n": the last line was blank, a new event starts. Any other line end (CRLF streams included)
    // gets a comment line, which is harmless between events too.
    return this.beforeLast === LF ? KEEP_ALIVE_EVENT : KEEP_ALIVE_LINE;
  }

  /** What ends the open line and event, so that a new event may follow: "", "\n" (at a line start) or "\n\n" (mid-line). */
  closer(): string {
    if (this.last === -1 || (this.last === LF && this.beforeLast === LF)) return "";
    return this.last === LF ? "\n" : "\n\n";
  }
}

/**
 * Calls `onIdle` whenever `everyMs` passed without `wrote()`; one timer, not rearmed on every
 * write (a stream writes a chunk per token).
 */
export class IdleTicker {
  private lastWriteAt = performance.now();
  private timer: ReturnType<typeof setTimeout> | null = null;
  private stopped = false;

  constructor(
    private readonly everyMs: number,
    private readonly onIdle: () => void,
  ) {
    if (!(everyMs > 0)) throw new RangeError(`keep-alive interval must be positive, got ${everyMs}`);
    this.arm(everyMs);
  }

  wrote(): void {
    this.lastWriteAt = performance.now();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private arm(delayMs: number): void {
    this.timer = setTimeout(() => this.tick(), delayMs);
  }

  private tick(): void {
    if (this.stopped) return;
    const idle = performance.now() - this.lastWriteAt;
    if (idle >= this.everyMs) {
      this.onIdle();
      this.lastWriteAt = performance.now();
      this.arm(this.everyMs);
    } else {
      this.arm(this.everyMs - idle);
    }
  }
}
