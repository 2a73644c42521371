/**
 * Every error answer of the API is JSON: {"error": {"message", "field"}}.
 * Validation issues name the offending field in path notation
 * ("contexts[2][5].id"); the body as a whole is "body". Client mistakes are
 * 4xx; anything else is a 500 with a generic message, logged to stderr.
 */
import type { Context, ErrorHandler } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { RequestError } from "../online/contextService.ts";

export interface ApiErrorBody {
  error: { message: string; field: string };
}

/** The field name used for the request body as a whole. */
export const BODY_FIELD = "body";

export function errorBody(message: string, field = ""): ApiErrorBody {
  return { error: { message, field } };
}

export function errorResponse(c: Context, status: ContentfulStatusCode, message: string, field = "", headers?: Record<string, string>): Response {
  return c.json(errorBody(message, field), status, headers);
}

/** A zod issue path as a field name: ["contexts", 2, 5, "id"] -> "contexts[2][5].id"; [] -> "body". */
export function fieldName(path: readonly PropertyKey[]): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else {
      const name = String(key);
      out += /^[A-Za-z_$][\w$]*$/.test(name) ? (out === "" ? name : `.${name}`) : `[${JSON.stringify(name)}]`;
    }
  }
  return out === "" ? BODY_FIELD : out;
}

interface Issue {
  code: string;
  path: PropertyKey[];
  message: string;
  keys?: string[];
  expected?: string;
  /** invalid_union: each alternative's issues, with paths relative to the union. */
  errors?: Issue[][];
}

/** Whether the input has the type of a union's alternative (so that alternative's issues say what is wrong). */
function informative(branch: readonly Issue[]): boolean {
  return !branch.some((issue) => issue.path.length === 0 && issue.code === "invalid_type");
}

/** A required field is absent. */
function missingField(issue: Issue): boolean {
  return issue.code === "invalid_type" && issue.path.length === 1 && /received undefined$/.test(issue.message);
}

/** The first issue of a failed validation, as {field, message}. */
export function describeIssue(issues: readonly Issue[]): { field: string; message: string } {
  let issue = issues[0];
  if (issue === undefined) return { field: BODY_FIELD, message: `${BODY_FIELD}: invalid` };
  // A union where exactly one alternative fits the input's type: report that alternative's problem.
  while (issue.code === "invalid_union" && issue.errors !== undefined) {
    let fitting = issue.errors.filter(informative);
    // Several object alternatives: the one the input has the fields of (not missing its first field) says what is wrong;
    // when the input has the fields of none, the first alternative's.
    if (fitting.length > 1) {
      const present = fitting.filter((branch) => branch.length > 0 && !missingField(branch[0]!));
      fitting = present.length === 1 ? present : present.length === 0 ? [fitting[0]!] : fitting;
    }
    if (fitting.length !== 1 || fitting[0]!.length === 0) break;
    const inner: Issue = fitting[0]![0]!;
    issue = { ...inner, path: [...issue.path, ...inner.path] };
  }
  let path = issue.path;
  let message = issue.message;
  if (issue.code === "unrecognized_keys" && issue.keys && issue.keys.length > 0) {
    path = [...path, issue.keys[0]!];
    message = "unknown field";
  } else if (issue.code === "invalid_type" && issue.path.length > 0 && /received undefined$/.test(issue.message)) {
    message = "required";
  } else if (issue.code === "invalid_type" && issue.path.length === 0 && issue.expected === "object") {
    message = "expected a JSON object";
  }
  const field = fieldName(path);
  return { field, message: `${field}: ${message}` };
}

/** What a validation failure answers. */
export function validationErrorResponse(c: Context, issues: readonly Issue[]): Response {
  const { field, message } = describeIssue(issues);
  return errorResponse(c, 400, message, field);
}

/**
 * Whether an error is the request body failing to arrive, not a fault of
 * ours: Bun ends the body stream with an AbortError when its HTTP parser
 * rejects the chunked encoding (it has then already answered 400 itself and
 * closed the connection) or the client goes away mid-body, and with "Request
 * body exceeded maxRequestBodySize" past its own cap (after answering 413).
 * `requestAborted`: the request's signal (the connection is gone). Returns
 * what to answer (the client may no longer read it), or null.
 */
export function bodyReadFailure(error: unknown, requestAborted: boolean): { status: 400 | 413; message: string } | null {
  if (!(error instanceof Error) && !(typeof DOMException !== "undefined" && error instanceof DOMException)) return null;
  const { name, message } = error as Error;
  if (/exceeded maxRequestBodySize/i.test(message)) return { status: 413, message: `${BODY_FIELD}: request body too large` };
  if (name === "AbortError" && requestAborted) return { status: 400, message: `${BODY_FIELD}: the request body could not be read (malformed chunked encoding, or the connection closed)` };
  return null;
}

/** The app's error handler: HTTP exceptions and service RequestErrors become 4xx JSON, the rest a logged 500. */
export function createErrorHandler(log: (message: string) => void): ErrorHandler {
  return (error, c) => {
    if (error instanceof RequestError) return errorResponse(c, 400, error.message, error.field);
    const unread = bodyReadFailure(error, c.req.raw.signal.aborted);
    if (unread !== null) return errorResponse(c, unread.status, unread.message, BODY_FIELD);
    if (error instanceof HTTPException) {
      const status = error.status;
      if (status === 400 && /json/i.test(error.message)) return errorResponse(c, 400, `${BODY_FIELD}: invalid JSON`, BODY_FIELD);
      if (status === 413) return errorResponse(c, 413, `${BODY_FIELD}: request body too large`, BODY_FIELD);
      if (status === 415) return errorResponse(c, 415, `${BODY_FIELD}: unsupported content type ${JSON.stringify(c.req.header("content-type") ?? "")}; send application/json`, BODY_FIELD);
      if (status >= 400 && status < 500) return errorResponse(c, status, error.message || "bad request");
    }
    log(`ctxr serve: internal error on ${c.req.method} ${c.req.path}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    return errorResponse(c, 500, "internal server error");
  };
}
