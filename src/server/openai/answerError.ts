/** A generation request that failed before or while it ran, as its HTTP answer. */
import type { Context } from "hono";
import { errorResponse } from "../../http/errors.ts";
import { engineFailureResponse } from "../generationFailure.ts";
import { InvalidRequest } from "./invalidRequest.ts";

/** An InvalidRequest as the 4xx naming its field, an engine failure as its status; anything else is rethrown. */
export function answerError(c: Context, error: unknown): Response {
  if (error instanceof InvalidRequest) return errorResponse(c, error.status, error.message, error.field, undefined, error.code);
  const failed = engineFailureResponse(c, error);
  if (failed !== null) return failed;
  throw error;
}
