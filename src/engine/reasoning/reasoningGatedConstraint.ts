/**
 * A structured-output or tool-call constraint that applies only after the answer's reasoning:
 * inside `<think>…</think>` the model writes freely, and the grammar starts with the first token
 * after the one that closes the reasoning (its matcher is not told of the reasoning's tokens).
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
  constructor(
    private readonly inner: GrammarConstraint,
    private readonly tracker: ReasoningTracker,
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
    if (this.free) return logits;
    const out = this.inner.masked(logits);
    const open = this.tracker.vocabulary.openToken;
    if (this.tracker.phase === "opening" && open !== null && open < logits.length) out[open] = logits[open]!;
    return out;
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
