/**
 * The checks a generation request passes before it queues: the prompt's tokens, whether prompt and
 * max_tokens fit the context, and the bounds of every option. Pure: the model's vocabulary size and
 * context length come in as arguments.
 */
import { promptTokens } from "../kv/segmentedPrompt.ts";
import { PromptTooLongError } from "./generationErrors.ts";
import type { GenerationRequest } from "./generationTypes.ts";
import { checkLogitsAdjustments } from "./logitsAdjuster.ts";

/**
 * The completion budget of a prompt of `promptLength` tokens: `maxTokens`, or what room a context
 * of `maxLen` tokens leaves; PromptTooLongError when prompt + max_tokens cannot fit.
 */
export function completionBudget(promptLength: number, maxTokens: number | null | undefined, maxLen: number): number {
  if (promptLength >= maxLen) {
    throw new PromptTooLongError(`the prompt has ${promptLength} tokens; the maximum context length of this model and KV cache is ${maxLen} tokens in all, so a prompt may have at most ${maxLen - 1}`, "prompt", true);
  }
  const budget = maxTokens ?? maxLen - promptLength;
  if (!Number.isSafeInteger(budget) || budget < 1) throw new PromptTooLongError(`max_tokens must be a positive integer, got ${budget}`, "max_tokens");
  if (promptLength + budget > maxLen) {
    throw new PromptTooLongError(
      `the maximum context length of this model and KV cache is ${maxLen} tokens, but ${promptLength + budget} were requested (${promptLength} in the prompt, ${budget} in max_tokens); lower max_tokens or shorten the prompt`,
      "max_tokens",
      true,
    );
  }
  return budget;
}

/**
 * Checks a request against a model of `vocab` token ids and a context of `maxLen` tokens, and
 * returns its completion budget. Throws PromptTooLongError (naming the request field) for bad
 * client input, RangeError for a bad deadline, and a plain Error when promptIds are not the
 * segments' tokens (a caller's bug).
 */
export function checkGenerationRequest(request: GenerationRequest, vocab: number, maxLen: number): number {
  const promptLength = request.promptIds.length;
  if (promptLength === 0) throw new PromptTooLongError("the prompt is empty; it needs at least one token", "prompt");
  for (const id of request.promptIds) {
    if (!Number.isSafeInteger(id) || id < 0 || id >= vocab) throw new PromptTooLongError(`prompt token ${id} is not in the model's vocabulary (0 to ${vocab - 1})`, "prompt");
  }
  const maxTokens = completionBudget(promptLength, request.maxTokens, maxLen);
  if (request.segments !== undefined) {
    const flat = promptTokens(request.segments);
    if (flat.length !== promptLength || flat.some((id, i) => id !== request.promptIds[i])) throw new Error("submit: promptIds must be the segments' tokens");
  }
  if (request.recomputeRatio !== undefined && !(request.recomputeRatio >= 0 && request.recomputeRatio <= 1)) {
    throw new PromptTooLongError(`recompute_ratio must be between 0 and 1, got ${request.recomputeRatio}`, "prompt");
  }
  if (request.adjustments !== undefined) checkLogitsAdjustments(request.adjustments, vocab);
  if (request.minTokens !== undefined && !(Number.isSafeInteger(request.minTokens) && request.minTokens >= 0)) throw new PromptTooLongError(`min_tokens must be a non-negative integer, got ${request.minTokens}`, "max_tokens");
  if (request.promptLogprobs != null && request.segments !== undefined) throw new PromptTooLongError("prompt logprobs (echo with logprobs) need a plain prompt, not segments", "prompt");
  const budget = request.kvBudget ?? null;
  if (budget !== null && !(budget > 0 && budget <= 1)) throw new PromptTooLongError(`kv_budget must be in (0, 1], got ${budget}`, "prompt");
  if (request.deadlineMs !== undefined && !(Number.isFinite(request.deadlineMs) && request.deadlineMs > 0)) throw new RangeError(`deadlineMs must be a positive number, got ${request.deadlineMs}`);
  return maxTokens;
}
