/**
 * Stop strings over streamed text. Text is released as soon as no stop string can
 * start in it; a tail that could be the beginning of a stop string is held back
 * until the following text settles it. On a match the text before the stop string
 * is returned (with the stop string itself only when `includeStop` is set: vLLM's
 * include_stop_str_in_output) with stopped set, and everything after is dropped. When several stop strings match, the one starting first wins.
 * Empty stop strings are ignored.
 */

export interface StopResult {
  /** Text that can be sent now. */
  text: string;
  /** A stop string was reached (this result's text ends just before it). */
  stopped: boolean;
}

export class StopMatcher {
  private readonly stops: string[];
  private readonly longest: number;
  private held = "";
  private done = false;
  /** The stop string that ended the text, once stopped. */
  matched: string | null = null;

  constructor(
    stops: readonly string[],
    private readonly includeStop = false,
  ) {
    this.stops = [...new Set(stops.filter((stop) => stop.length > 0))];
    this.longest = this.stops.reduce((max, stop) => Math.max(max, stop.length), 0);
  }

  get stopped(): boolean {
    return this.done;
  }

  push(text: string): StopResult {
    if (this.done) return { text: "", stopped: true };
    if (this.stops.length === 0) return { text, stopped: false };
    const buffer = this.held + text;
    let first = -1;
    for (const stop of this.stops) {
      // A match cannot lie wholly in the held tail (it would have been found before),
      // but one may start there.
      const at = buffer.indexOf(stop);
      if (at !== -1 && (first === -1 || at < first)) {
        first = at;
        this.matched = stop;
      }
    }
    if (first !== -1) {
      this.done = true;
      this.held = "";
      return { text: buffer.slice(0, first) + (this.includeStop ? this.matched! : ""), stopped: true };
    }
    const keep = this.partialMatchLength(buffer);
    this.held = buffer.slice(buffer.length - keep);
    return { text: buffer.slice(0, buffer.length - keep), stopped: false };
  }

  /** The held-back text, at the end of generation (no stop string followed it). */
  flush(): string {
    const text = this.held;
    this.held = "";
    return text;
  }

  /** The longest tail of buffer that is a proper beginning of some stop string. */
  private partialMatchLength(buffer: string): number {
    for (let length = Math.min(this.longest - 1, buffer.length); length > 0; length--) {
      const start = buffer.length - length;
      for (const stop of this.stops) {
        if (stop.length > length && buffer.startsWith(stop.slice(0, length), start)) return length;
      }
    }
    return 0;
  }
}
