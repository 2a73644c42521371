/**
 * How the generation routes (chat, completions, responses) answer a request the engine did not
 * complete: a full queue is a 429 with Retry-After, a passed deadline a 504, shutdown a 503, a
 * runner failure a 500; in a stream, the same as an error event in OpenAI's shape.
 */
import type { Context } from "hono";
import { DeadlineExceededError, GenerationFailedError, QueueFullError, SchedulerClosedError } from "../engine/generationErrors.ts";
import { GrammarRuntimeError } from "../engine/grammar/grammarErrors.ts";
import { errorBody, errorResponse, type ApiError } from "../http/errors.ts";

/** The error code of a request cancelled at its deadline. */
export const DEADLINE_CODE = "deadline_exceeded";

/** The answer to an engine failure, or null when `error` is not one (the caller rethrows it). */
export function engineFailureResponse(c: Context, error: unknown): Response | null {
  if (error instanceof QueueFullError) {
    return errorResponse(c, 429, `busy: ${error.message} (--max-waiting-requests ${error.limit}); retry after ${error.retryAfterSeconds} s`, "", { "Retry-After": String(error.retryAfterSeconds) });
  }
  if (error instanceof DeadlineExceededError) return errorResponse(c, 504, error.message, error.field, undefined, DEADLINE_CODE);
  if (error instanceof SchedulerClosedError) return errorResponse(c, 503, error.message);
  // The request's own grammar (too ambiguous, or no text that ends): the client's to fix.
  if (error instanceof GrammarRuntimeError) return errorResponse(c, 400, error.message, "", undefined, error.code);
  if (error instanceof GenerationFailedError) return errorResponse(c, 500, error.message);
  return null;
}

/** What a failed generation answers: the message of the failure. */
export function failureMessage(error: unknown): string {
  if (error instanceof GenerationFailedError || error instanceof SchedulerClosedError || error instanceof DeadlineExceededError || error instanceof GrammarRuntimeError) return error.message;
  return `generation failed: ${(error as Error).message ?? String(error)}`;
}

/** The error that ends a stream that failed: the error a whole answer would have had (OpenAI's shape). */
export function streamFailure(error: unknown): ApiError {
  if (error instanceof DeadlineExceededError) return errorBody(error.message, error.field, 504, DEADLINE_CODE).error;
  if (error instanceof GrammarRuntimeError) return errorBody(error.message, "", 400, error.code).error;
  return errorBody(failureMessage(error), "", error instanceof SchedulerClosedError ? 503 : 500).error;
}
