/**
 * One sequence's structured-output constraint, as the request thread sees it: its xgrammar
 * matcher lives on the grammar thread (grammar/grammarThread.ts), which follows the tokens
 * accepted here and answers each next token's mask (a transferred buffer). The mask is asked for
 * ahead (`prepare`, called while the runner computes the step's logits) and applied to a copy of
 * the logits (disallowed tokens to −Infinity); the raw logits stay for logprobs. Where the grammar
 * allows a single continuation, `jumpForward` returns its tokens, accepted, to append without
 * sampling. On top of the grammar, the output stays well-formed UTF-8 (utf8Tokens.ts): xgrammar
 * lets malformed byte sequences through.
 *
 * Accepted tokens are sent with the next request, and kept: when the grammar thread is replaced
 * (another request made xgrammar abort or run past its limit) the matcher is opened again on the
 * new thread and the tokens replayed, so this sequence goes on as if nothing happened. A request
 * of this sequence's own that runs past the step limit ends it (GrammarRuntimeError).
 */
import { GrammarRuntimeError, GrammarThreadError, GrammarThreadRestartedError, GrammarTimeLimitError } from "./grammar/grammarErrors.ts";
import type { GrammarThread } from "./grammar/grammarThread.ts";
import type { BuildTarget, GrammarThreadIn, GrammarThreadOut } from "./grammar/grammarThreadMessages.ts";
import { UTF8_COMPLETE, afterBytes, type Utf8State, type Utf8TokenTable } from "./utf8Tokens.ts";

/** How the constraint reaches its matcher. */
export interface MatcherHome {
  thread: GrammarThread;
  id: number;
  key: string;
  target: BuildTarget;
  /** The generation of the thread the matcher was opened on. */
  generation: number;
  compileLimitMs: number;
  stepLimitMs: number;
  stopTokenIds: ReadonlySet<number>;
}

export class GrammarConstraint {
  private mask: Int32Array | null = null;
  private pending: Promise<Int32Array> | null = null;
  private scratch = new Float32Array(0);
  private disposed = false;
  private ended = false;
  private utf8State: Utf8State = UTF8_COMPLETE;
  /** Tokens the matcher has taken (replayed on a new thread). */
  private readonly history: number[] = [];
  /** Tokens accepted here, not yet sent. */
  private unsent: number[] = [];
  /** Why the next mask cannot be had (the sequence must end with it), once known. */
  failure: Error | null = null;

  constructor(
    private readonly home: MatcherHome,
    private readonly utf8: Utf8TokenTable,
    private readonly encode: (text: string) => number[],
    private readonly onDispose: () => void,
  ) {}

  /** The matcher accepted a stop token: the constrained output is complete. */
  get terminated(): boolean {
    return this.ended;
  }

  /** Starts asking for the next token's mask, unless it is known or under way. */
  prepare(): void {
    if (this.mask !== null || this.pending !== null || this.disposed || this.ended) return;
    const pending = this.call("mask").then((reply) => (reply as Extract<GrammarThreadOut, { kind: "mask" }>).mask);
    pending.catch((error: Error) => {
      this.failure ??= error;
    });
    this.pending = pending;
  }

  /** Whether the next token's mask is here (ready() would not wait). */
  get hasMask(): boolean {
    return this.mask !== null;
  }

  /** Waits for the next token's mask; GrammarRuntimeError when it cannot be had. */
  async ready(): Promise<void> {
    this.prepare();
    const pending = this.pending;
    if (pending === null) return;
    try {
      this.mask = await pending;
    } finally {
      if (this.pending === pending) this.pending = null;
    }
  }

  /** A copy of `logits` with every token the grammar forbids next at −Infinity (call after ready()). */
  masked(logits: Float32Array): Float32Array {
    const mask = this.mask;
    if (mask === null) throw new Error("GrammarConstraint.masked: the mask is not ready");
    if (this.scratch.length !== logits.length) this.scratch = new Float32Array(logits.length);
    const out = this.scratch;
    out.set(logits);
    const allowed = this.wellFormed(mask);
    let any = false;
    for (let word = 0; word < allowed.length; word++) {
      const bits = allowed[word]!;
      const base = word * 32;
      if (bits === -1) {
        any ||= base < out.length;
        continue;
      }
      for (let bit = 0; bit < 32 && base + bit < out.length; bit++) {
        if (((bits >>> bit) & 1) === 0) out[base + bit] = -Infinity;
        else any = true;
      }
    }
    // Ids past the mask (a model vocabulary wider than the tokenizer's) are never allowed.
    for (let id = allowed.length * 32; id < out.length; id++) out[id] = -Infinity;
    if (!any) throw new GrammarRuntimeError("the grammar allows no token here: it has no string that ends (a rule that only refers to itself?)", "grammar_dead_end");
    return out;
  }

  /**
   * The grammar's mask less the tokens that would make the text malformed UTF-8 (after a partial
   * character, also every token without bytes: specials, the end). Should that leave nothing, the
   * grammar's mask as it is: the grammar outranks the encoding.
   */
  private wellFormed(mask: Int32Array): Int32Array {
    const out = Int32Array.from(mask);
    let any = false;
    if (this.utf8State.due === 0) {
      const forbidden = this.utf8.forbiddenAtBoundary;
      for (let word = 0; word < out.length; word++) {
        out[word] = out[word]! & ~(forbidden[word] ?? 0);
        if (out[word] !== 0) any = true;
      }
    } else {
      for (let word = 0; word < out.length; word++) {
        let bits = out[word]!;
        for (let bit = 0; bit < 32 && bits !== 0; bit++) {
          if (((bits >>> bit) & 1) === 0) continue;
          const tokenBytes = this.utf8.bytes[word * 32 + bit];
          if (tokenBytes === undefined || tokenBytes.length === 0 || afterBytes(this.utf8State, tokenBytes) === null) bits &= ~(1 << bit);
        }
        out[word] = bits;
        if (bits !== 0) any = true;
      }
    }
    return any ? out : mask;
  }

  private advance(id: number): void {
    const tokenBytes = this.utf8.bytes[id];
    if (tokenBytes !== undefined && tokenBytes.length > 0) this.utf8State = afterBytes(this.utf8State, tokenBytes) ?? UTF8_COMPLETE;
  }

  /**
   * The sampled token moves the matcher on (it must be one the mask allowed). It reaches the
   * grammar thread with the next request; a token the grammar rejects fails that request.
   */
  accept(id: number): void {
    if (this.mask !== null && !maskAllows(this.mask, id)) throw new Error(`the grammar rejected token ${id}: its mask does not allow it`);
    this.unsent.push(id);
    this.advance(id);
    this.mask = null;
    // xgrammar ends a matcher on a stop token its grammar allows there.
    if (this.home.stopTokenIds.has(id)) this.ended = true;
  }

  /**
   * The tokens of the longest string the grammar forces next, each accepted (those of it the
   * matcher takes, at most `limit`); none when the grammar leaves a choice.
   */
  async jumpForward(limit: number): Promise<number[]> {
    if (this.ended || limit <= 0 || this.disposed) return [];
    const { text } = (await this.call("jump")) as Extract<GrammarThreadOut, { kind: "jump" }>;
    if (text === "") return [];
    const candidates: number[] = [];
    let state = this.utf8State;
    for (const id of this.encode(text)) {
      const tokenBytes = this.utf8.bytes[id];
      const next = tokenBytes === undefined || tokenBytes.length === 0 ? state : afterBytes(state, tokenBytes);
      if (candidates.length >= limit || next === null) break;
      state = next;
      candidates.push(id);
    }
    if (candidates.length === 0) return [];
    const { taken } = (await this.call("forced", candidates)) as Extract<GrammarThreadOut, { kind: "forced" }>;
    const forced = candidates.slice(0, taken);
    this.history.push(...forced);
    for (const id of forced) this.advance(id);
    if (forced.length > 0) this.mask = null;
    return forced;
  }

  /**
   * One request to this matcher on the grammar thread, with the tokens accepted since the last.
   * A thread replaced meanwhile (not this matcher's doing): the matcher is opened again there with
   * its tokens replayed, and the request sent again, once.
   */
  private async call(kind: "mask" | "jump" | "forced", tokens: number[] = []): Promise<GrammarThreadOut> {
    const home = this.home;
    for (let attempt = 0; ; attempt++) {
      if (this.disposed) throw new GrammarRuntimeError("the request was cancelled", "grammar_failed");
      const accept = this.unsent;
      try {
        if (home.generation !== home.thread.generation) await this.reopen();
        const message: GrammarThreadIn = kind === "forced" ? { kind, matcher: home.id, tokens } : { kind, matcher: home.id, accept };
        const reply = await home.thread.request(message, home.stepLimitMs, "step");
        if (kind !== "forced") {
          this.history.push(...accept);
          if (this.unsent === accept) this.unsent = [];
          else this.unsent = this.unsent.slice(accept.length);
        }
        return reply;
      } catch (error) {
        if (error instanceof GrammarThreadRestartedError && attempt === 0) continue;
        throw runtimeError(error, home.stepLimitMs);
      }
    }
  }

  private async reopen(): Promise<void> {
    const home = this.home;
    const opening = home.thread.request({ kind: "open", matcher: home.id, key: home.key, target: home.target, replay: [...this.history] }, home.compileLimitMs, "compile");
    const generation = home.thread.generation;
    await opening;
    home.generation = generation;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.home.thread.post({ kind: "close", matcher: this.home.id }, this.home.generation);
    this.onDispose();
  }
}

function maskAllows(mask: Int32Array, id: number): boolean {
  const word = mask[id >>> 5];
  return word !== undefined && ((word >>> (id & 31)) & 1) === 1;
}

/** What ends the sequence when its matcher fails mid-generation. */
function runtimeError(error: unknown, stepLimitMs: number): Error {
  if (error instanceof GrammarRuntimeError) return error;
  if (error instanceof GrammarTimeLimitError) {
    return new GrammarRuntimeError(`computing the grammar's next-token mask took longer than --max-grammar-step-ms (${stepLimitMs} ms); the grammar is too ambiguous`, "grammar_step_limit");
  }
  if (error instanceof GrammarThreadError || error instanceof GrammarThreadRestartedError) return new GrammarRuntimeError(`the grammar failed: ${error.message}`, "grammar_failed");
  return error as Error;
}
