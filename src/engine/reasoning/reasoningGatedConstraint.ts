/**
 * A structured-output or tool-call constraint that applies only after the answer's reasoning:
 * inside `<think>…</think>` the model writes freely, and the grammar starts with the first token
 * after the one that closes the reasoning (its matcher is not told of the reasoning's tokens).
 * The answer the constraint asks for is still owed, so the reasoning may not end the sequence
 * with a stop token (the grammar itself allows one only once its output is complete); max_tokens
 * can still cut it.
 * Where the answer may still open `<think>` (qwen3, a prompt that neither opens nor closes it),
 * the first tokens may be the grammar's or the `<think>` token: the grammar's make the answer
 * content at once, `<think>` makes it reasoning. The phase is the sequence's tracker's, which
 * sees every token the sequence appends (sampled or forced).
 */
import type { GrammarConstraint } from "../grammarConstraint.ts";
import type { OutputConstraint } from "../outputConstraint.ts";
import type { ReasoningTracker } from "./reasoningTracker.ts";

const READY = Promise.resolve();

export class ReasoningGatedConstraint implements OutputConstraint {
  private scratch = new Float32Array(0);

  constructor(
    private readonly inner: GrammarConstraint,
    private readonly tracker: ReasoningTracker,
    private readonly stopIds: ReadonlySet<number>,
  ) {}

  private get free(): boolean {
    return this.tracker.phase === "reasoning";
  }

  get failure(): Error | null {
    return this.free ? null : this.inner.failure;
  }

  get terminated(): boolean {
    return this.tracker.phase === "content" && this.inner.terminated;
  }

  get hasMask(): boolean {
    return this.free || this.inner.hasMask;
  }

  prepare(): void {
    if (!this.free) this.inner.prepare();
  }

  ready(): Promise<void> {
    return this.free ? READY : this.inner.ready();
  }

  masked(logits: Float32Array): Float32Array {
    if (this.free) return this.withoutStops(logits);
    const out = this.inner.masked(logits);
    const open = this.tracker.vocabulary.openToken;
    if (this.tracker.phase === "opening" && open !== null && open < logits.length) out[open] = logits[open]!;
    return out;
  }

  /** A copy of the logits with the stop tokens at −Infinity (as they are, should that leave nothing). */
  private withoutStops(logits: Float32Array): Float32Array {
    if (this.stopIds.size === 0) return logits;
    if (this.scratch.length !== logits.length) this.scratch = new Float32Array(logits.length);
    const out = this.scratch;
    out.set(logits);
    for (const id of this.stopIds) if (id < out.length) out[id] = -Infinity;
    return out.some((value) => value > -Infinity) ? out : logits;
  }

  accept(id: number): void {
    const phase = this.tracker.phase;
    if (phase === "content" || (phase === "opening" && id !== this.tracker.vocabulary.openToken)) this.inner.accept(id);
  }

  async jumpForward(limit: number): Promise<number[]> {
    return this.tracker.phase === "content" ? this.inner.jumpForward(limit) : [];
  }

  dispose(): void {
    this.inner.dispose();
  }
}
