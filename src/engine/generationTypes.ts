/**
 * What a generation request is and what comes back: the request, its events as they stream, the
 * whole result and the usage figures (usage.ctxr).
 */
import type { SamplingParams } from "./sampler.ts";
import type { GrammarConstraint } from "./grammarConstraint.ts";
import type { LogitsAdjustments } from "./logitsAdjuster.ts";
import type { SegmentedPrompt } from "../kv/segmentedPrompt.ts";
import type { ManagedPrefillUsage } from "../kv/managedPrefill.ts";
import type { RecomputePolicy } from "../kv/recomputeSelection.ts";
import type { ReasoningStart } from "./reasoning/reasoningParser.ts";
import type { ReasoningVocabulary } from "./reasoning/reasoningTracker.ts";

export interface GenerationRequest {
  /** The prompt's token ids (at least one). */
  promptIds: readonly number[];
  /** Most tokens to generate (at least 1); null: as many as the model's length allows. */
  maxTokens: number | null;
  sampling: SamplingParams;
  /** Stop strings: the text ends before the first one generated. */
  stop?: readonly string[];
  /** Ids that end generation (eos, and the request's stop_token_ids); their text is not part of the output unless includeStopInOutput. */
  stopTokenIds?: readonly number[];
  /** The stop string or stop token that ended the text is part of it (vLLM's include_stop_str_in_output). */
  includeStopInOutput?: boolean;
  /** Penalties and logit bias applied to the logits before sampling (logprobs stay the raw ones). */
  adjustments?: LogitsAdjustments;
  /** Structured output: the grammar the text must follow (the sequence owns it and disposes of it when it ends). */
  constraint?: GrammarConstraint;
  /**
   * The answer may reason (`<think>…</think>`): where it starts, and the vocabulary to follow it
   * token by token. The constraint then applies after the reasoning, and the finish counts its tokens.
   */
  reasoning?: { start: Exclude<ReasoningStart, "content">; vocabulary: ReasoningVocabulary };
  /** Tokens to generate before a stop token or stop string may end the text (vLLM's min_tokens; default 0). */
  minTokens?: number;
  /**
   * Salts this request's prefix-cache names (vLLM's cache_salt): only requests with the same salt
   * share cached blocks, so one tenant cannot learn from timings what another's prompts held.
   */
  cacheSalt?: string;
  /** Return each token's logprob and this many top alternatives (null: no logprobs). */
  logprobs?: number | null;
  /**
   * Also the prompt's tokens' logprobs (each given the tokens before it; the first has none) with
   * this many top alternatives (null: none). The whole prompt is then computed (no cached prefix).
   */
  promptLogprobs?: number | null;
  /** Leave special tokens out of the text (default true). */
  skipSpecialTokens?: boolean;
  /** KV-managed prefill: the prompt as segments (promptIds must be their tokens). */
  segments?: SegmentedPrompt;
  /** Recompute policy of the managed prefill (default: the scheduler's). */
  kvPolicy?: RecomputePolicy;
  /** Share of reused chunk tokens to recompute, 0..1 (default: the scheduler's). */
  recomputeRatio?: number;
  /** Sparse decode (CHESS): the share of the KV each decode step reads, (0, 1]; null or 1: all of it. */
  kvBudget?: number | null;
  /** Cancel the request if it has not finished this many ms after submission (the scheduler's requestTimeoutMs caps it). */
  deadlineMs?: number;
  /**
   * A chat's turn: once answered, its prompt and answer ids are remembered by their text, so that
   * the next turn, which sends the answer back as text, is prompted with these very ids
   * (generatedTokenMemory.ts) and finds their KV in the prefix cache.
   */
  rememberAnswer?: boolean;
}

/** What happened to a request's prompt and KV (usage.ctxr). */
export interface CtxrUsage extends Partial<ManagedPrefillUsage> {
  prompt_tokens_prefix_reused: number;
  prompt_tokens_chunk_reused: number;
  prompt_tokens_recomputed: number;
  prompt_tokens_computed: number;
  ttft_ms: number;
  /** Submission to first admission (time spent waiting in the queue). */
  queue_ms: number;
  /** The recompute ratio the prompt's reused chunks got (policies that take one): the request's, the target's (--reuse-target-agreement) or --recompute-ratio. */
  recompute_ratio?: number;
  /** Sparse decode: steps decoded from a page subset, and selections made. */
  sparse_decode_steps?: number;
  sparse_reconstructions?: number;
}

export interface GeneratedToken {
  id: number;
  /** With logprobs: log p(id) under the raw logits. */
  logprob?: number;
  /** With logprobs: the most likely tokens, most likely first. */
  top?: { id: number; logprob: number }[];
}

export type FinishReason = "stop" | "length";

export type GenerationEvent =
  | { type: "delta"; text: string; tokens: GeneratedToken[]; promptLogprobs?: GeneratedToken[] }
  | { type: "finish"; reason: FinishReason; promptTokens: number; completionTokens: number; reasoningTokens?: number; ctxr: CtxrUsage; promptLogprobs?: GeneratedToken[] };

export interface GenerationResult {
  text: string;
  tokens: GeneratedToken[];
  /** With promptLogprobs: the prompt's tokens after the first, each with its logprob. */
  promptLogprobs?: GeneratedToken[];
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
  /** With request.reasoning: the generated tokens of the reasoning. */
  reasoningTokens?: number;
  ctxr: CtxrUsage;
}
