/**
 * API-key check for mutating routes: `Authorization: Bearer KEY` or
 * `x-api-key: KEY`. Keys are compared in constant time (as SHA-256 digests,
 * so neither their content nor their length leaks through timing).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { MiddlewareHandler } from "hono";
import { errorResponse } from "../http/errors.ts";

function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

/** The key a request presents, if any. */
export function presentedKey(authorization: string | undefined, apiKeyHeader: string | undefined): string | undefined {
  if (apiKeyHeader !== undefined) return apiKeyHeader;
  if (authorization === undefined) return undefined;
  const match = /^Bearer[ \t]+(.+)$/i.exec(authorization.trim());
  return match ? match[1]!.trim() : undefined;
}

/** A checker of presented keys against `key`, in constant time. */
export function keyChecker(key: string): (presented: string | undefined) => boolean {
  const expected = digest(key);
  return (presented) => {
    // Always hash and compare, so a missing key takes as long as a wrong one.
    const ok = timingSafeEqual(digest(presented ?? ""), expected);
    return ok && presented !== undefined;
  };
}

/** Middleware answering 401 JSON unless the request carries the key. */
export function requireApiKey(key: string): MiddlewareHandler {
  const check = keyChecker(key);
  return async (c, next) => {
    if (!check(presentedKey(c.req.header("authorization"), c.req.header("x-api-key")))) {
      return errorResponse(c, 401, "missing or wrong API key (send Authorization: Bearer KEY or x-api-key: KEY)", "", { "WWW-Authenticate": 'Bearer realm="ctxr"' });
    }
    await next();
  };
}
