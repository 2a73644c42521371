/**
 * How the generation routes (chat, completions, responses) answer a request the engine did not
 * complete: a full queue is a 429 with Retry-After, a passed deadline a 504, shutdown a 503, a
 * runner failure a 500; in a stream, the same as an error event in OpenAI's shape.
 */
import type { Context } from "hono";
import { DeadlineExceededError, GenerationFailedError, QueueFullError, SchedulerClosedError } from "../engine/generationScheduler.ts";
import { errorResponse } from "./errors.ts";

/** The answer to an engine failure, or null when `error` is not one (the caller rethrows it). */
export function engineFailureResponse(c: Context, error: unknown): Response | null {
  if (error instanceof QueueFullError) {
    return errorResponse(c, 429, `busy: ${error.message} (--max-waiting-requests ${error.limit}); retry after ${error.retryAfterSeconds} s`, "", { "Retry-After": String(error.retryAfterSeconds) });
  }
  if (error instanceof DeadlineExceededError) return errorResponse(c, 504, error.message, error.field);
  if (error instanceof SchedulerClosedError) return errorResponse(c, 503, error.message);
  if (error instanceof GenerationFailedError) return errorResponse(c, 500, error.message);
  return null;
}

/** What a failed generation answers: the message of the failure. */
export function failureMessage(error: unknown): string {
  if (error instanceof GenerationFailedError || error instanceof SchedulerClosedError || error instanceof DeadlineExceededError) return error.message;
  return `generation failed: ${(error as Error).message ?? String(error)}`;
}

/** The error that ends a stream that failed (OpenAI's error shape; code: the HTTP status a whole answer would have had). */
export function streamFailure(error: unknown): { message: string; type: string; code: number } {
  if (error instanceof DeadlineExceededError) return { message: error.message, type: "timeout_error", code: 504 };
  if (error instanceof SchedulerClosedError) return { message: error.message, type: "server_error", code: 503 };
  return { message: failureMessage(error), type: "server_error", code: 500 };
}
