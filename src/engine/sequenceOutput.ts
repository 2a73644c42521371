/**
 * Where a sequence's logits become its output: the token sampled (or forced by its grammar), its
 * text and events out to the consumer, and the sequence's end, finished or failed. The scheduler
 * decides when; this decides what comes out (the text and events are shaped by tokenOutput.ts).
 */
import type { EngineTokenAccount } from "../accounting/tokenAccounts.ts";
import { GrammarRuntimeError } from "./grammar/grammarErrors.ts";
import type { FinishReason, GeneratedToken, GenerationRequest } from "./generationTypes.ts";
import type { LatencyObserver } from "./schedulerTypes.ts";
import { SamplingError } from "./sampler.ts";
import type { Sequence } from "./sequence.ts";
import { appendToken, deltaEvent, finishEvent, outputToken, samplingLogits } from "./tokenOutput.ts";

/** The scheduler's counts of how requests ended (this bumps finished and failed). */
export interface EndCounters {
  finished: number;
  failed: number;
}

export class SequenceOutput {
  constructor(
    private readonly counters: EndCounters,
    /** The context length: a sequence that reaches it ends. */
    private readonly maxModelLen: () => number,
    private readonly latency?: LatencyObserver,
    /** Told each finished request's prompt usage (what ctxr saved: /v1/stats, /metrics, the stats line). */
    private readonly tokenAccount?: EngineTokenAccount,
    private readonly finished?: (request: GenerationRequest, tokens: readonly number[]) => void,
  ) {}

  /** Ends the sequence with an error (its consumer gets it); nothing when it has ended already. */
  fail(sequence: Sequence, error: Error): void {
    if (sequence.done) return;
    sequence.stopDeadline();
    sequence.done = true;
    sequence.constraint?.dispose();
    this.counters.failed++;
    sequence.events.end(error);
  }

  private finish(sequence: Sequence, reason: FinishReason, finalText: string, tokens: GeneratedToken[]): void {
    sequence.stopDeadline();
    sequence.done = true;
    this.latency?.finished((performance.now() - sequence.submittedAt) / 1000);
    sequence.constraint?.dispose();
    this.counters.finished++;
    const event = finishEvent(sequence, reason);
    if (event.type === "finish") {
      const usage = event.ctxr;
      this.tokenAccount?.record({ promptTokens: event.promptTokens, prefixReusedTokens: usage.prompt_tokens_prefix_reused, chunkReusedTokens: usage.prompt_tokens_chunk_reused, recomputedTokens: usage.prompt_tokens_recomputed });
    }
    if (finalText !== "" || tokens.length > 0) sequence.events.push({ type: "delta", text: finalText, tokens });
    sequence.events.push(event);
    sequence.events.end();
    this.finished?.(sequence.request, sequence.tokens);
  }

  /**
   * Samples the next token, unless the sequence's grammar failed (its mask could not be had, or
   * allows nothing): then the sequence alone ends with that error. Whether it sampled.
   */
  acceptOrFail(sequence: Sequence, logits: Float32Array): boolean {
    const failure = sequence.constraint?.failure ?? null;
    if (failure !== null) {
      this.fail(sequence, failure);
      return false;
    }
    try {
      this.accept(sequence, logits);
      return true;
    } catch (error) {
      if (!(error instanceof GrammarRuntimeError)) throw error;
      this.fail(sequence, error);
      return false;
    }
  }

  /**
   * The token the runner chose by its greedy rows (takesGreedyRow), as sampling would have: -1
   * (no logit above -Infinity) is the sampler's error.
   */
  acceptGreedy(sequence: Sequence, id: number): void {
    if (id < 0) throw new SamplingError("every logit is -Infinity or NaN");
    this.take(sequence, { id });
  }

  /** Samples the next token from the logits and passes its text on; ends the sequence on eos, a stop string or a length limit. */
  private accept(sequence: Sequence, logits: Float32Array): void {
    const id = sequence.sampler.sample(samplingLogits(sequence, logits));
    sequence.adjuster?.observe(id);
    sequence.constraint?.accept(id);
    this.take(sequence, outputToken(sequence, id, logits));
  }

  private take(sequence: Sequence, token: GeneratedToken): void {
    const now = performance.now();
    if (sequence.ttftMs === null) {
      sequence.ttftMs = now - sequence.submittedAt;
      const usage = sequence.ctxrUsage;
      this.latency?.firstToken(sequence.ttftMs / 1000, {
        cachedTokens: usage.prompt_tokens_prefix_reused + usage.prompt_tokens_chunk_reused,
        computedTokens: usage.prompt_tokens_computed + usage.prompt_tokens_recomputed,
      });
    } else if (sequence.lastTokenAt !== null) {
      this.latency?.interToken((now - sequence.lastTokenAt) / 1000);
    }
    sequence.lastTokenAt = now;
    this.emit(sequence, token);
  }

  /**
   * Jump-forward: where the grammar allows a single continuation, its tokens follow without
   * sampling (they are computed with the next step). Not with logprobs: they have no logits. Then
   * the next mask is asked for at once, so that it is computed while the step runs.
   */
  async jumpAhead(sequence: Sequence): Promise<void> {
    const constraint = sequence.constraint;
    if (constraint === null || sequence.done) return;
    const topN = sequence.request.logprobs;
    if (topN === undefined || topN === null) {
      const room = Math.min(sequence.maxTokens - sequence.generated, this.maxModelLen() - sequence.tokens.length);
      let forced: number[];
      try {
        forced = await constraint.jumpForward(room);
      } catch (error) {
        if (!(error instanceof GrammarRuntimeError)) throw error;
        this.fail(sequence, error);
        return;
      }
      for (const id of forced) {
        if (sequence.done || sequence.cancelled) return;
        sequence.adjuster?.observe(id);
        this.emit(sequence, { id });
      }
    }
    if (!sequence.done && !sequence.cancelled) constraint.prepare();
  }

  /** A new token joins the sequence: its text goes out, or it ends the sequence. */
  private emit(sequence: Sequence, token: GeneratedToken): void {
    const output = appendToken(sequence, token, this.maxModelLen());
    if (output.finish !== null) this.finish(sequence, output.finish, output.text, [token]);
    else sequence.events.push(deltaEvent(sequence, output.text, token));
  }
}
