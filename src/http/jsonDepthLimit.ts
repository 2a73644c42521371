/**
 * Middleware that refuses a JSON body nested deeper than a limit with a 400 naming the field,
 * before any validator or handler walks it (zod's checks and the handlers recurse). The parsed
 * body stays in Hono's request cache, so the json validator after it does not parse it again.
 * A body that is not valid JSON is left to that validator's own error.
 */
import type { MiddlewareHandler } from "hono";
import { errorResponse } from "./errors.ts";
import { depthProblem } from "./jsonDepth.ts";

export function jsonDepthLimit(maxDepth: number): MiddlewareHandler {
  return async (c, next) => {
    if (!/\bjson\b/i.test(c.req.header("content-type") ?? "")) return next();
    let body: unknown;
    try {
      body = await c.req.json();
    } catch {
      return next();
    }
    const deep = depthProblem(body, maxDepth);
    if (deep !== null) return errorResponse(c, 400, deep.message, deep.field);
    return next();
  };
}
