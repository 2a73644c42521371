/**
 * Refuses requests that would change the state while the state's sink takes no more changes for
 * now (--state: the queue for an unreachable Redis is at --state-queue-bytes): 503 with
 * Retry-After, answered before the request changes anything, so a refused request changes no
 * later answer and memory stays bounded.
 */
import type { MiddlewareHandler } from "hono";
import type { ContextService } from "../online/contextService.ts";
import { errorResponse } from "../http/errors.ts";

/** The POST routes that change the state (the context-reuse API, and the proxy's, which records what it forwards). */
export function stateWritingPaths(proxied: boolean): string[] {
  const own = ["/v1/reorder", "/v1/dedup", "/v1/evict", "/v1/reset"];
  return proxied ? [...own, "/v1/chat/completions", "/v1/completions", "/v1/responses"] : own;
}

export function refuseWhileStateQueueFull(service: ContextService): MiddlewareHandler {
  return async (c, next) => {
    if (c.req.method !== "POST") return next();
    const refusal = service.writeRefusal;
    if (refusal === null) return next();
    return errorResponse(c, 503, refusal.message, "", { "Retry-After": String(refusal.retryAfterSeconds) }, "state_queue_full");
  };
}
