/**
 * From a step's logits to what the client gets: the logits a sequence samples from (penalties,
 * grammar mask, min_tokens), a token's logprobs, the text a new token adds (detokenized, past the
 * stop strings) and whether it ends the sequence, the prompt's logprobs, and the events.
 */
import type { FinishReason, GeneratedToken, GenerationEvent } from "./generationTypes.ts";
import { tokenLogprobs } from "./sampler.ts";
import type { Sequence } from "./sequence.ts";

/**
 * The logits with every stop token at −Infinity (min_tokens), on a copy when `shared` (the raw
 * logits); as they are when that would leave no token possible (a grammar that only allows the end).
 */
export function withoutStopTokens(logits: Float32Array, shared: boolean, stopIds: ReadonlySet<number>): Float32Array {
  let open = false;
  for (let id = 0; id < logits.length && !open; id++) if (!stopIds.has(id) && logits[id]! > -Infinity) open = true;
  if (!open || stopIds.size === 0) return logits;
  const out = shared ? Float32Array.from(logits) : logits;
  for (const id of stopIds) if (id < out.length) out[id] = -Infinity;
  return out;
}

/** The logits the sequence samples from: its penalties and bias, its grammar's mask, no stop token before min_tokens. */
export function samplingLogits(sequence: Sequence, logits: Float32Array): Float32Array {
  let sampling = sequence.adjuster === null ? logits : sequence.adjuster.apply(logits);
  if (sequence.constraint !== null) sampling = sequence.constraint.masked(sampling);
  if (sequence.generated < (sequence.request.minTokens ?? 0)) sampling = withoutStopTokens(sampling, sampling === logits, sequence.stopIds);
  return sampling;
}

/**
 * Whether the runner's greedy row (argmax token, ForwardRequest.greedyRows) is all this step of the
 * sequence needs: greedy sampling from the raw logits, nothing reading them (logprobs, penalties
 * or bias, a grammar, no stop token yet under min_tokens, sparse decode's uncertainty).
 */
export function takesGreedyRow(sequence: Sequence): boolean {
  const logprobs = sequence.request.logprobs;
  return (
    sequence.sampler.greedy &&
    sequence.adjuster === null &&
    sequence.constraint === null &&
    sequence.sparse === null &&
    (logprobs === undefined || logprobs === null) &&
    sequence.generated >= (sequence.request.minTokens ?? 0)
  );
}

/** The sampled token as the output reports it: with logprobs, its own and the top alternatives under the raw logits. */
export function outputToken(sequence: Sequence, id: number, logits: Float32Array): GeneratedToken {
  const token: GeneratedToken = { id };
  const topN = sequence.request.logprobs;
  if (topN !== undefined && topN !== null) {
    const lp = tokenLogprobs(logits, id, topN);
    token.logprob = lp.logprob;
    token.top = lp.top;
  }
  return token;
}

/** What a new token did: the text it lets out, and the reason it ended the sequence (null: it goes on). */
export interface TokenText {
  text: string;
  finish: FinishReason | null;
}

/**
 * A new token joins the sequence: the text it lets out, and whether it ends the sequence (a stop
 * token or string, the grammar complete, max_tokens or the context length `maxModelLen` reached).
 */
export function appendToken(sequence: Sequence, token: GeneratedToken, maxModelLen: number): TokenText {
  const id = token.id;
  sequence.reasoning?.push(id);
  sequence.tokens.push(id);
  sequence.generated++;
  const minTokens = sequence.request.minTokens ?? 0;
  if ((sequence.stopIds.has(id) && sequence.generated > minTokens) || sequence.constraint?.terminated === true) {
    // The stop token's own text only with includeStopInOutput (special tokens' text is still skipped unless asked for).
    const own = sequence.request.includeStopInOutput || !sequence.stopIds.has(id) ? sequence.text.push(id) : "";
    const rest = sequence.stop.push(own + sequence.text.flush());
    return { text: rest.stopped ? rest.text : rest.text + sequence.stop.flush(), finish: "stop" };
  }
  // Before min_tokens the text passes by the stop strings unchecked.
  const early = sequence.generated <= minTokens;
  const piece = early ? { text: sequence.stop.flush() + sequence.text.push(id), stopped: false } : sequence.stop.push(sequence.text.push(id));
  if (piece.stopped) return { text: piece.text, finish: "stop" };
  if (sequence.generated >= sequence.maxTokens || sequence.tokens.length >= maxModelLen) {
    const rest = sequence.stop.push(sequence.text.flush());
    return { text: piece.text + rest.text + (rest.stopped ? "" : sequence.stop.flush()), finish: rest.stopped ? "stop" : "length" };
  }
  return { text: piece.text, finish: null };
}

/** The event of a token that did not end the sequence (the first one also carries the prompt's logprobs, when asked). */
export function deltaEvent(sequence: Sequence, text: string, token: GeneratedToken): GenerationEvent {
  const first = sequence.generated === 1 && sequence.request.promptLogprobs != null;
  return { type: "delta", text, tokens: [token], ...(first ? { promptLogprobs: sequence.promptTokenLogprobs } : {}) };
}

/** The last event of a finished sequence: why it ended, its token counts and usage. */
export function finishEvent(sequence: Sequence, reason: FinishReason): GenerationEvent {
  return {
    type: "finish",
    reason,
    promptTokens: sequence.promptLength,
    completionTokens: sequence.generated,
    ...(sequence.reasoning !== null ? { reasoningTokens: sequence.reasoning.reasoningTokens } : {}),
    ctxr: sequence.ctxrUsage,
    ...(sequence.request.promptLogprobs != null ? { promptLogprobs: sequence.promptTokenLogprobs } : {}),
  };
}

/** Whether a step running the sequence's tokens from `start` returns logits for every row (prompt logprobs). */
export function wantsPromptRows(sequence: Sequence, start: number): boolean {
  return sequence.request.promptLogprobs != null && start < sequence.promptLength - 1 && start === sequence.promptTokenLogprobs.length;
}

/**
 * Records the logprobs of the prompt tokens that rows [start, start + count) predict (`vocab`
 * logits a row), and returns the last row's logits when that row samples the next token (else none).
 */
export function recordPromptLogprobs(sequence: Sequence, start: number, count: number, rows: Float32Array, vocab: number): Float32Array {
  const topN = sequence.request.promptLogprobs ?? 0;
  for (let row = 0; row < count; row++) {
    const next = start + row + 1;
    if (next >= sequence.promptLength) break;
    const id = sequence.tokens[next]!;
    const lp = tokenLogprobs(rows.subarray(row * vocab, (row + 1) * vocab), id, topN);
    sequence.promptTokenLogprobs.push({ id, logprob: lp.logprob, top: lp.top });
  }
  return start + count === sequence.tokens.length ? rows.subarray((count - 1) * vocab, count * vocab) : new Float32Array(0);
}
