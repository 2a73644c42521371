/**
 * Checks of a generation request before anything is built for it: the served model, the fields
 * this engine cannot honour, the number of choices, and whether the prompt fits the context.
 */
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import { PromptTooLongError } from "../../engine/generationErrors.ts";
import type { ChatCompletionBody, CompletionBody } from "../openaiSchemas.ts";
import { refusedField, type Endpoint } from "../requestFields.ts";
import { InvalidRequest } from "./invalidRequest.ts";

/** Most choices (`n`) one prompt may ask for. */
export const MAX_CHOICES_PER_PROMPT = 64;

export function choicesPerPrompt(body: ChatCompletionBody | CompletionBody): number {
  return body.n ?? 1;
}

/** Fields OpenAI defines that this engine cannot honour. */
export function refuseUnsupported(body: ChatCompletionBody | CompletionBody, endpoint: Endpoint): void {
  const refusal = refusedField(body as Record<string, unknown>, endpoint);
  if (refusal !== null) throw new InvalidRequest(refusal.field, refusal.why);
  if (choicesPerPrompt(body) > MAX_CHOICES_PER_PROMPT) throw new InvalidRequest("n", `at most ${MAX_CHOICES_PER_PROMPT} choices per prompt, got ${body.n}`);
  const maxTokens = ("max_completion_tokens" in body ? body.max_completion_tokens : null) ?? body.max_tokens;
  if (body.min_tokens != null && maxTokens != null && body.min_tokens > maxTokens) throw new InvalidRequest("min_tokens", `must not exceed max_tokens (${maxTokens}), got ${body.min_tokens}`);
}

/** A model other than the served one: 404 naming `model`. */
export function checkServedModel(engine: GenerationEngine, model: string | undefined | null): void {
  if (model !== undefined && model !== null && model !== "" && model !== engine.modelId) {
    throw new InvalidRequest("model", `model ${JSON.stringify(model)} does not exist; this server serves ${JSON.stringify(engine.modelId)}`, 404);
  }
}

/** PromptTooLongError as the 400 naming its field (`field` overrides it: one prompt of several). */
export function promptTooLong(error: PromptTooLongError, field: string = error.field): InvalidRequest {
  return new InvalidRequest(field, error.message, 400, error.overLength ? "context_length_exceeded" : undefined);
}

/**
 * Checks the prompt's length (and max_tokens) against the context before anything costly is built
 * for the request (a tool list's grammar): the same 400 the engine would give when it is queued.
 */
export function checkPromptFits(engine: GenerationEngine, promptLength: number, maxTokens: number | null | undefined): void {
  try {
    engine.scheduler.checkLength(promptLength, maxTokens);
  } catch (error) {
    if (error instanceof PromptTooLongError) throw promptTooLong(error);
    throw error;
  }
}
