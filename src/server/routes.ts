/**
 * The API's routes as OpenAPI route definitions: path, method, request and
 * response schemas, error answers and security. app.ts attaches the handlers;
 * the OpenAPI document is generated from these definitions.
 */
import { createRoute, z } from "@hono/zod-openapi";
import type { MiddlewareHandler } from "hono";
import type { ApiSchemas } from "./schemas.ts";

export interface RouteOptions {
  /** Middleware run before validation on mutating routes (API key, body limit). */
  mutating: MiddlewareHandler[];
  /** Whether the server requires an API key on mutating routes (documents the 401 and the security). */
  secured: boolean;
}

const ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'Invalid input: malformed JSON, a wrong type or value, a limit exceeded; "field" names the offending field.',
  401: "Missing or wrong API key.",
  413: "The request body is larger than the server's --max-body-bytes.",
  415: "The body is not application/json.",
  500: "Internal error (never caused by client input).",
};

export function createRoutes(schemas: ApiSchemas, options: RouteOptions) {
  const errorResponses = (...codes: number[]) =>
    Object.fromEntries(codes.map((code) => [code, { description: ERROR_DESCRIPTIONS[code]!, content: { "application/json": { schema: schemas.ErrorResponse } } }]));
  const json = <T extends z.ZodType>(schema: T, description: string) => ({ description, content: { "application/json": { schema } } });
  const jsonBody = <T extends z.ZodType>(schema: T) => ({ body: { required: true as const, content: { "application/json": { schema } } } });
  const mutatingErrors = options.secured ? [400, 401, 413, 415, 500] : [400, 413, 415, 500];
  const security: Record<string, string[]>[] | undefined = options.secured ? [{ bearerAuth: [] }, { apiKeyHeader: [] }] : undefined;

  const post = <P extends string>(path: P) => ({ method: "post" as const, path, middleware: options.mutating, security, tags: ["context reuse"] });
  /** A POST that changes the index: a JSON body in, a JSON answer out, the mutating routes' errors. */
  const mutation = <P extends string, Req extends z.ZodType, Res extends z.ZodType>(path: P, text: { summary: string; description?: string; answer: string }, request: Req, response: Res) =>
    createRoute({
      ...post(path),
      summary: text.summary,
      ...(text.description === undefined ? {} : { description: text.description }),
      request: jsonBody(request),
      responses: { 200: json(response, text.answer), ...errorResponses(...mutatingErrors) },
    });

  return {
    health: createRoute({
      method: "get",
      path: "/healthz",
      tags: ["operations"],
      summary: "Liveness check",
      responses: {
        200: json(schemas.HealthResponse, "The server is up."),
        503: json(schemas.HealthResponse, "The server is up but cannot make changes durable (its journal failed)."),
        ...errorResponses(500),
      },
    }),
    vllmHealth: createRoute({
      method: "get",
      path: "/health",
      tags: ["operations"],
      summary: "Liveness check in vLLM's form",
      description: "An empty 200 while the server works: its journal, and with --model the model runner. With --upstream it is ctxr's own; the engine's is at /engine/health.",
      responses: {
        200: { description: "Up (empty body, as vLLM answers)." },
        503: json(schemas.ErrorResponse, "The journal failed, or the model runner is not running (restarting or shut down)."),
      },
    }),
    ready: createRoute({
      method: "get",
      path: "/ready",
      tags: ["operations"],
      summary: "Readiness check",
      description: "200 while something can serve requests: with --upstream, at least one upstream (its GET /v1/models answered 200 at the last probe and it is in rotation); with --model, the model runner. 503 with the reason otherwise. /health and /healthz stay liveness checks.",
      responses: {
        200: json(schemas.ReadyResponse, "Ready."),
        503: json(schemas.ReadyResponse, "Not ready: no upstream can serve, the model runner is not running, or the journal failed."),
      },
    }),
    openapi: createRoute({
      method: "get",
      path: "/openapi.json",
      tags: ["operations"],
      summary: "This OpenAPI 3 document",
      responses: { 200: json(z.object({}).passthrough().openapi({ description: "An OpenAPI 3.0 document." }), "The API description."), ...errorResponses(500) },
    }),
    metrics: createRoute({
      method: "get",
      path: "/metrics",
      tags: ["operations"],
      summary: "Prometheus metrics (text format 0.0.4)",
      responses: {
        200: { description: "Request counts and latency histograms per route, index size, estimated prefix hits.", content: { "text/plain; version=0.0.4": { schema: z.string() } } },
        ...errorResponses(500),
      },
    }),
    stats: createRoute({
      method: "get",
      path: "/v1/stats",
      tags: ["context reuse"],
      summary: "Index, conversation and hit statistics, and the start-up recovery report",
      responses: { 200: json(schemas.StatsResponse, "Current statistics."), ...errorResponses(500) },
    }),
    reorder: mutation(
      "/v1/reorder",
      {
        summary: "Reorder contexts for prefix reuse and insert them into the live index",
        description:
          "Each context's blocks are reordered so that the longest prefix already in the index comes first; the context is then inserted and gets a request id. " +
          "With conversation_id, the blocks are also recorded for /v1/dedup. The schedule lists the contexts in the order to run them.",
        answer: "Reordered contexts, in request order, and their schedule.",
      },
      schemas.ReorderRequest,
      schemas.ReorderResponse,
    ),
    schedule: mutation(
      "/v1/schedule",
      {
        summary: "Offline index build of one batch (stateless; the same result as `ctxr index build`)",
        answer: "The schedule, and each context's reordered blocks and search path.",
      },
      schemas.ScheduleRequest,
      schemas.ScheduleResponse,
    ),
    dedup: mutation(
      "/v1/dedup",
      {
        summary: "Replace blocks sent earlier in a conversation by a reference annotation",
        answer: "The blocks to send and the ids of the replaced ones.",
      },
      schemas.DedupRequest,
      schemas.DedupResponse,
    ),
    evict: mutation(
      "/v1/evict",
      {
        summary: "Remove contexts the engine evicted: by request id, or from engine KV-event batches",
        description:
          'Either {"request_ids": [...]}, or KV-cache events as vLLM and SGLang publish them: {"ts"?, "events": [{"type": "BlockRemoved", "request_ids": [...]}, {"type": "AllBlocksCleared"}, ...], "upstream"?}, or a list of such batches. ' +
          "Events apply in order; AllBlocksCleared removes every context routed to the batch's upstream (every context when it names none; conversations are kept); other event types are ignored.",
        answer: "How many contexts were removed (unknown ids are ignored).",
      },
      schemas.EvictRequest,
      schemas.EvictResponse,
    ),
    reset: createRoute({
      ...post("/v1/reset"),
      summary: "Forget every context and conversation",
      responses: { 200: json(schemas.ResetResponse, "Everything was forgotten."), ...errorResponses(...(options.secured ? [401, 500] : [500])) },
    }),
  };
}

/** The paths served, for metrics labels and 405 answers. */
export function routeTable(routes: ReturnType<typeof createRoutes>): Map<string, string[]> {
  const table = new Map<string, string[]>();
  for (const route of Object.values(routes)) {
    const methods = table.get(route.path) ?? [];
    methods.push(route.method.toUpperCase());
    if (route.method === "get") methods.push("HEAD");
    table.set(route.path, methods);
  }
  return table;
}
