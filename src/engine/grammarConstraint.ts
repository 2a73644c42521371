/**
 * One sequence's structured-output constraint: an xgrammar matcher that follows the tokens
 * generated and gives the next token's mask. The mask is computed ahead (`prepare`, called while
 * the runner computes the step's logits) and applied to a copy of the logits (disallowed tokens
 * to −Infinity); the raw logits stay for logprobs. Where the grammar allows a single continuation,
 * `jumpForward` returns its tokens, accepted, to append without sampling. On top of the grammar,
 * the output stays well-formed UTF-8 (utf8Tokens.ts): xgrammar lets malformed byte sequences
 * through.
 */
import type { GrammarMatcher } from "@mlc-ai/web-xgrammar";
import { UTF8_COMPLETE, afterBytes, type Utf8State, type Utf8TokenTable } from "./utf8Tokens.ts";

export class GrammarConstraint {
  private mask: Int32Array | null = null;
  private pending: Promise<Int32Array> | null = null;
  private scratch = new Float32Array(0);
  private disposed = false;
  private utf8State: Utf8State = UTF8_COMPLETE;

  constructor(
    private readonly matcher: GrammarMatcher,
    private readonly utf8: Utf8TokenTable,
    private readonly encode: (text: string) => number[],
    private readonly onDispose: () => void,
  ) {}

  /** The matcher accepted a stop token: the constrained output is complete. */
  get terminated(): boolean {
    return this.matcher.isTerminated();
  }

  /** Starts computing the next token's mask, unless it is known or under way. */
  prepare(): void {
    if (this.mask === null && this.pending === null && !this.disposed && !this.terminated) this.pending = this.matcher.getNextTokenBitmask();
  }

  /** Waits for the next token's mask. */
  async ready(): Promise<void> {
    this.prepare();
    if (this.pending !== null) {
      this.mask = await this.pending;
      this.pending = null;
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
    for (let word = 0; word < allowed.length; word++) {
      const bits = allowed[word]!;
      if (bits === -1) continue;
      const base = word * 32;
      for (let bit = 0; bit < 32 && base + bit < out.length; bit++) if (((bits >>> bit) & 1) === 0) out[base + bit] = -Infinity;
    }
    // Ids past the mask (a model vocabulary wider than the tokenizer's) are never allowed.
    for (let id = allowed.length * 32; id < out.length; id++) out[id] = -Infinity;
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

  /** The sampled token moves the matcher on (it must be one the mask allowed). */
  accept(id: number): void {
    if (!this.matcher.acceptToken(id)) throw new Error(`the grammar rejected token ${id}, which its mask allowed`);
    this.advance(id);
    this.mask = null;
  }

  /**
   * The tokens of the longest string the grammar forces next, each accepted (those of it the
   * matcher takes, at most `limit`); none when the grammar leaves a choice.
   */
  jumpForward(limit: number): number[] {
    if (this.terminated || limit <= 0) return [];
    const text = this.matcher.findJumpForwardString();
    if (text === "") return [];
    const taken: number[] = [];
    for (const id of this.encode(text)) {
      const tokenBytes = this.utf8.bytes[id];
      if (taken.length >= limit || (tokenBytes !== undefined && afterBytes(this.utf8State, tokenBytes) === null) || !this.matcher.acceptToken(id)) break;
      this.advance(id);
      taken.push(id);
    }
    if (taken.length > 0) this.mask = null;
    return taken;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.matcher.dispose();
    this.onDispose();
  }
}
