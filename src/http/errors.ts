/**
 * Every error answer of the API is JSON in OpenAI's shape, {"error": {"message",
 * "type", "param", "code"}}, plus ctxr's own "field" (what the context-reuse
 * REST API has always answered; kept as an alias of param). Validation issues
 * name the offending field in path notation ("contexts[2][5].id"); the body as
 * a whole is "body" in field (param null). Client mistakes are 4xx; anything
 * else is a 500 with a generic message, logged to stderr.
 */
import type { Context, ErrorHandler } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { RequestError } from "./requestError.ts";

export interface ApiError {
  message: string;
  /** The kind of error, from the status (errorType). */
  type: string;
  /** The offending request field, null when no single field is at fault. */
  param: string | null;
  /** A short machine-readable reason ("invalid_value", "model_not_found", ...), or null. */
  code: string | null;
  /** ctxr's name for param: "body" for the body as a whole, "" when no field is at fault. */
  field: string;
}

export interface ApiErrorBody {
  error: ApiError;
}

/** The field name used for the request body as a whole. */
export const BODY_FIELD = "body";

/** OpenAI's error type for an HTTP status. */
export function errorType(status: number): string {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
  }
  return status >= 500 ? "server_error" : "invalid_request_error";
}

/** The code an error of this status gets when its site names none. */
function defaultCode(status: number, param: string | null): string | null {
  switch (status) {
    case 400:
    case 422:
      return param === null ? "invalid_request" : "invalid_value";
    case 401:
      return "invalid_api_key";
    case 404:
      return param === "model" ? "model_not_found" : "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "request_too_large";
    case 415:
      return "unsupported_media_type";
    case 429:
      return "rate_limit_exceeded";
    case 502:
      return "upstream_unavailable";
    case 503:
      return "service_unavailable";
    case 504:
      return "upstream_timeout";
  }
  return status >= 500 ? "internal_error" : null;
}

/**
 * The error body of a `status` answer. `field`: the offending field ("" none, "body" the body as a
 * whole: both give param null); `code`: the reason, by default one that follows from the status.
 */
export function errorBody(message: string, field = "", status = 400, code?: string | null): ApiErrorBody {
  const param = field === "" || field === BODY_FIELD ? null : field;
  return { error: { message, type: errorType(status), param, code: code === undefined ? defaultCode(status, param) : code, field } };
}

export function errorResponse(c: Context, status: ContentfulStatusCode, message: string, field = "", headers?: Record<string, string>, code?: string | null): Response {
  return c.json(errorBody(message, field, status, code), status, headers);
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

/** The first issue of a failed validation, as {field, message, code}. */
export function describeIssue(issues: readonly Issue[]): { field: string; message: string; code: string } {
  let issue = issues[0];
  if (issue === undefined) return { field: BODY_FIELD, message: `${BODY_FIELD}: invalid`, code: "invalid_request" };
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
  let code = issue.code === "invalid_type" ? "invalid_type" : "invalid_value";
  if (issue.code === "unrecognized_keys" && issue.keys && issue.keys.length > 0) {
    path = [...path, issue.keys[0]!];
    message = "unknown field";
    code = "unknown_parameter";
  } else if (issue.code === "invalid_type" && issue.path.length > 0 && /received undefined$/.test(issue.message)) {
    message = "required";
    code = "missing_required_parameter";
  } else if (issue.code === "invalid_type" && issue.path.length === 0 && issue.expected === "object") {
    message = "expected a JSON object";
  }
  const field = fieldName(path);
  return { field, message: `${field}: ${message}`, code };
}

/** What a validation failure answers. */
export function validationErrorResponse(c: Context, issues: readonly Issue[]): Response {
  const { field, message, code } = describeIssue(issues);
  return errorResponse(c, 400, message, field, undefined, code);
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
      if (status === 400 && /json/i.test(error.message)) return errorResponse(c, 400, `${BODY_FIELD}: invalid JSON`, BODY_FIELD, undefined, "invalid_json");
      if (status === 413) return errorResponse(c, 413, `${BODY_FIELD}: request body too large`, BODY_FIELD);
      if (status === 415) return errorResponse(c, 415, `${BODY_FIELD}: unsupported content type ${JSON.stringify(c.req.header("content-type") ?? "")}; send application/json`, BODY_FIELD);
      if (status >= 400 && status < 500) return errorResponse(c, status, error.message || "bad request");
    }
    log(`ctxr serve: internal error on ${c.req.method} ${c.req.path}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    return errorResponse(c, 500, "internal server error");
  };
}
