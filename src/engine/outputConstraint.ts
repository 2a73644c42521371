/**
 * What the scheduler and the sequence's output ask of a sequence's constraint: a grammar
 * (grammarConstraint.ts), or one gated to apply only after the answer's reasoning
 * (reasoning/reasoningGatedConstraint.ts).
 */
export interface OutputConstraint {
  /** Why the next mask cannot be had (the sequence must end with it), once known. */
  readonly failure: Error | null;
  /** The constrained output is complete. */
  readonly terminated: boolean;
  /** Whether the next token's mask is here (ready() would not wait). */
  readonly hasMask: boolean;
  /** Starts asking for the next token's mask. */
  prepare(): void;
  /** Waits for the next token's mask. */
  ready(): Promise<void>;
  /** The logits with every token not allowed next at −Infinity (a copy when anything is masked). */
  masked(logits: Float32Array): Float32Array;
  /** The sampled token moves the constraint on. */
  accept(id: number): void;
  /** Tokens forced next, accepted (at most `limit`). */
  jumpForward(limit: number): Promise<number[]>;
  dispose(): void;
}
