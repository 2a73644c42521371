/** The server's small parts on their own: field names, issue descriptions, metrics text, API-key checks. */
import { describe, expect, test } from "bun:test";
import { z } from "@hono/zod-openapi";
import { keyChecker, presentedKey } from "../../src/server/auth.ts";
import { describeIssue, errorBody, errorType, fieldName } from "../../src/http/errors.ts";
import { DEFAULT_LIMITS } from "../../src/http/limits.ts";
import { ServerMetrics } from "../../src/server/metrics.ts";
import { createSchemas } from "../../src/server/schemas.ts";

describe("field names", () => {
  test("zod paths in the API's notation", () => {
    expect(fieldName(["contexts", 2, 5])).toBe("contexts[2][5]");
    expect(fieldName(["contexts", 0, 1, "id"])).toBe("contexts[0][1].id");
    expect(fieldName(["templates", "priority"])).toBe("templates.priority");
    expect(fieldName([])).toBe("body");
    expect(fieldName(["odd key", 0])).toBe('["odd key"][0]');
  });

  test("the first issue, digging into the union alternative that fits the input", () => {
    const schemas = createSchemas(DEFAULT_LIMITS);
    const describe = (body: unknown) => describeIssue(schemas.ReorderRequest.safeParse(body).error!.issues as never);
    expect(describe({ contexts: [[1, { id: 2, tokens: 1.5 }]] }).field).toBe("contexts[0][1].tokens");
    expect(describe({ contexts: [[null]] })).toEqual({ field: "contexts[0][0]", message: expect.stringContaining("contexts[0][0]: expected a block"), code: "invalid_value" });
    expect(describe({ contexts: [[{ id: [] }]] }).message).toContain("contexts[0][0].id: expected a block id");
    expect(describe({ contexts: [[1]], extra: true })).toEqual({ field: "extra", message: "extra: unknown field", code: "unknown_parameter" });
    expect(describe({})).toEqual({ field: "contexts", message: "contexts: required", code: "missing_required_parameter" });
    expect(describe("text")).toEqual({ field: "body", message: "body: expected a JSON object", code: "invalid_type" });
  });

  test("valid bodies pass the schemas unchanged", () => {
    const schemas = createSchemas(DEFAULT_LIMITS);
    const body = { contexts: [[1, "a", { id: 2, tokens: 3 }, { text: "x" }, { id: "b", text: "y" }]], conversation_id: "c", templates: { priority: "{order}", doc: "D{n}", separator: ",", dedup: "see {doc}" } };
    expect(schemas.ReorderRequest.parse(body)).toEqual(body);
    expect(schemas.EvictRequest.parse({ request_ids: [] })).toEqual({ request_ids: [] });
    expect(z.safeParse(schemas.Block, -7).success).toBe(true);
  });
});

describe("error bodies", () => {
  test("OpenAI's type by status", () => {
    const types = [400, 401, 403, 404, 405, 413, 415, 422, 429, 500, 502, 503, 504].map((status) => [status, errorType(status)]);
    expect(Object.fromEntries(types)).toEqual({
      400: "invalid_request_error",
      401: "authentication_error",
      403: "permission_error",
      404: "not_found_error",
      405: "invalid_request_error",
      413: "invalid_request_error",
      415: "invalid_request_error",
      422: "invalid_request_error",
      429: "rate_limit_error",
      500: "server_error",
      502: "server_error",
      503: "service_unavailable",
      504: "server_error",
    });
  });

  test("param is the field (null for none or the body as a whole); field stays; the code follows the status unless given", () => {
    expect(errorBody("top_p: too large", "top_p")).toEqual({ error: { message: "top_p: too large", type: "invalid_request_error", param: "top_p", code: "invalid_value", field: "top_p" } });
    expect(errorBody("body: invalid JSON", "body", 400, "invalid_json").error).toMatchObject({ param: null, code: "invalid_json", field: "body" });
    expect(errorBody("model: nope", "model", 404).error).toMatchObject({ type: "not_found_error", param: "model", code: "model_not_found" });
    expect(errorBody("no route GET /x", "", 404).error).toMatchObject({ param: null, code: "not_found", field: "" });
    expect(errorBody("busy", "", 429).error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" });
    expect(errorBody("key", "", 401).error).toMatchObject({ type: "authentication_error", code: "invalid_api_key" });
    expect(errorBody("odd", "", 418, null).error).toMatchObject({ type: "invalid_request_error", param: null, code: null });
  });
});

describe("metrics", () => {
  test("the server's families and the service gauges", () => {
    const metrics = new ServerMetrics();
    metrics.observeRequest("/v1/reorder", "POST", 200, 0.0003);
    const text = metrics.render({
      contexts: 5,
      nodes: 7,
      index_tokens: 1280,
      conversations: 2,
      index_bytes: 9000,
      index_bytes_limit: 65536,
      index_budget_evicted_contexts: 3,
      dedup_bytes: 700,
      dedup_bytes_limit: null,
      dedup_budget_evicted_conversations: 0,
      prompt_tokens: 3000,
      prefix_hit_tokens: 512,
      reordered_contexts: 6,
      evicted_contexts: 1,
    });
    expect(text).toContain('ctxr_http_requests_total{route="/v1/reorder",method="POST",status="200"} 1\n');
    expect(text).toContain('ctxr_http_request_duration_seconds_bucket{route="/v1/reorder",le="0.0005"} 1\n');
    expect(text).toContain('ctxr_http_request_duration_seconds_bucket{route="/v1/reorder",le="0.00025"} 0\n');
    for (const line of ["ctxr_index_contexts 5", "ctxr_index_nodes 7", "ctxr_index_tokens 1280", "ctxr_conversations 2", "ctxr_prompt_tokens_total 3000", "ctxr_prefix_hit_tokens_total 512"]) {
      expect(text).toContain(`${line}\n`);
    }
    for (const line of ["ctxr_index_bytes 9000", "ctxr_index_bytes_limit 65536", "ctxr_index_budget_evictions_total 3", "ctxr_dedup_bytes 700", "ctxr_dedup_budget_evictions_total 0"]) {
      expect(text).toContain(`${line}\n`);
    }
    // No limit, no limit series.
    expect(text).not.toContain("ctxr_dedup_bytes_limit");
    expect(text).toContain("# TYPE ctxr_index_contexts gauge\n");
    expect(text).toContain("# TYPE ctxr_prefix_hit_tokens_total counter\n");
  });
});

describe("API key", () => {
  test("the key a request presents: x-api-key, else a Bearer token", () => {
    expect(presentedKey("Bearer abc", undefined)).toBe("abc");
    expect(presentedKey("bearer   abc ", undefined)).toBe("abc");
    expect(presentedKey("Basic abc", undefined)).toBeUndefined();
    expect(presentedKey(undefined, "xyz")).toBe("xyz");
    expect(presentedKey("Bearer abc", "xyz")).toBe("xyz");
    expect(presentedKey(undefined, undefined)).toBeUndefined();
  });

  test("only the exact key passes", () => {
    const check = keyChecker("k3y");
    expect(check("k3y")).toBe(true);
    for (const wrong of [undefined, "", "k3", "k3y ", "K3Y", "k3yk3y"]) expect(check(wrong)).toBe(false);
  });
});
