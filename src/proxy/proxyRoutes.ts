/**
 * Mounts the proxy on the app: POST /v1/chat/completions, /v1/completions and
 * /v1/responses (rewritten), and every other request that is not one of ctxr's own routes
 * (passed through: /v1/*, and the engine's paths outside /v1 such as
 * /tokenize, /detokenize, /version). Where ctxr answers a path itself
 * (/health, /healthz, /metrics, /openapi.json, /v1/stats, ...), the engine's
 * is reached as /engine/PATH. ctxr's API key, when set, guards them all; the
 * body limit applies. The OpenAPI document describes them (the passthrough as
 * one generic operation per method).
 */
import { z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context, MiddlewareHandler } from "hono";
import { every } from "hono/combine";
import { rawPath, type ContextProxy } from "./contextProxy.ts";

export const PROXY_ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/responses"] as const;
export const PASSTHROUGH_LABEL = "/v1/* (passthrough)";
/** /engine/PATH goes to the engine's PATH, also where ctxr answers PATH itself. */
export const ENGINE_PREFIX = "/engine";
export const ENGINE_PASSTHROUGH_LABEL = "/engine/* (passthrough)";
export const OTHER_PASSTHROUGH_LABEL = "/* (passthrough)";

export interface ProxyMountOptions {
  /** The API key check (when ctxr has a key). */
  middleware: MiddlewareHandler[];
  /** Largest request body (413 beyond). */
  maxBodyBytes: number;
  /** Levels of JSON nesting a rewritten route's body may have. */
  maxJsonDepth: number;
  /** ctxr's own paths: a request to one of them with another method is answered by `notAllowed`, not forwarded. */
  ownPaths: ReadonlyMap<string, string[]>;
  notAllowed(c: Context): Response;
  secured: boolean;
  errorSchema: z.ZodType;
}

const under = (path: string, prefix: string) => path === prefix || path.startsWith(`${prefix}/`);

/** The metrics label of a proxied path (bounded: the two rewritten routes, then one per kind of passthrough). */
export function proxyRouteLabel(path: string): string {
  if ((PROXY_ROUTES as readonly string[]).includes(path)) return path;
  if (under(path, "/v1")) return PASSTHROUGH_LABEL;
  return under(path, ENGINE_PREFIX) ? ENGINE_PASSTHROUGH_LABEL : OTHER_PASSTHROUGH_LABEL;
}

export function mountProxyRoutes(app: OpenAPIHono, proxy: ContextProxy, options: ProxyMountOptions): void {
  const guard: MiddlewareHandler = options.middleware.length === 0 ? (_c, next) => next() : every(...options.middleware);
  const { maxBodyBytes: limit, maxJsonDepth: depth } = options;
  app.post("/v1/chat/completions", guard, (c) => proxy.generate(c, "chat", limit, depth));
  app.post("/v1/completions", guard, (c) => proxy.generate(c, "completion", limit, depth));
  app.post("/v1/responses", guard, (c) => proxy.generate(c, "responses", limit, depth));
  const ownPath: MiddlewareHandler = async (c, next) => {
    if (options.ownPaths.has(c.req.path)) return options.notAllowed(c);
    await next();
  };
  app.all("/v1/*", ownPath, guard, (c) => proxy.passthrough(c, limit));
  app.all(`${ENGINE_PREFIX}/*`, guard, (c) => proxy.passthrough(c, limit, rawPath(c).slice(ENGINE_PREFIX.length) || "/"));
  app.all("*", ownPath, guard, (c) => proxy.passthrough(c, limit));
  documentProxyRoutes(app, proxy, options);
}

function documentProxyRoutes(app: OpenAPIHono, proxy: ContextProxy, options: ProxyMountOptions): void {
  const security: Record<string, string[]>[] | undefined = options.secured ? [{ bearerAuth: [] }, { apiKeyHeader: [] }] : undefined;
  const error = (description: string) => ({ description, content: { "application/json": { schema: options.errorSchema } } });
  const upstreamAnswer = {
    description: "The upstream's answer, relayed as it arrives: JSON, or with \"stream\": true an SSE stream (text/event-stream). Upstream errors come back with the upstream's status and body.",
    content: { "application/json": { schema: z.object({}).passthrough() }, "text/event-stream": { schema: z.string() } },
  };
  const proxyErrors = {
    400: error('Malformed JSON, or a malformed "documents" or "ctxr" field ("field" names it).'),
    ...(options.secured ? { 401: error("Missing or wrong ctxr API key.") } : {}),
    413: error("The request body is larger than the server's --max-body-bytes."),
    429: error("--max-upstream-requests answers are being relayed already; retry after the Retry-After seconds."),
    502: error("No upstream is reachable (all out of rotation after connection errors)."),
    504: error("The upstream sent no answer in time."),
  };

  const Document = z
    .object({ id: z.union([z.string(), z.number()]).optional(), title: z.string().optional(), text: z.string() })
    .openapi("ProxyDocument", { description: "A retrieved document; rendered into the last new user message, then removed from the body." });
  const CtxrOptions = z
    .object({
      conversation_id: z.string().min(1).max(256).optional().openapi({ description: "Default: a hash of the first system and user messages." }),
      reorder: z.boolean().optional().openapi({ description: "Reorder the documents through the live index (default true)." }),
      dedup: z.boolean().optional().openapi({ description: "Replace documents sent in an earlier turn by a location note (default true)." }),
    })
    .openapi("CtxrRequestOptions", { description: "ctxr's options for this request; removed before forwarding." });
  const engineField = proxy.engine === "vllm" ? ' ctxr sets "request_id" (vLLM) to the id it records.' : proxy.engine === "sglang" ? ' ctxr sets "rid" (SGLang) to the id it records.' : proxy.engine === "auto" ? ' ctxr sets the request-id field of the engine it detected upstream ("request_id" for vLLM, "rid" for SGLang) to the id it records.' : "";

  const ChatRequest = z
    .object({
      model: z.string().optional(),
      messages: z.array(z.object({ role: z.string(), content: z.unknown() }).passthrough()),
      stream: z.boolean().optional(),
      documents: z.array(Document).optional(),
      ctxr: CtxrOptions.optional(),
    })
    .passthrough()
    .openapi("ProxyChatCompletionRequest", { description: "An OpenAI chat completion request; any other field is forwarded as sent." });
  const CompletionRequest = z
    .object({ model: z.string().optional(), prompt: z.unknown(), stream: z.boolean().optional(), ctxr: CtxrOptions.optional() })
    .passthrough()
    .openapi("ProxyCompletionRequest", { description: "An OpenAI completion request; any other field is forwarded as sent." });

  const upstreams = proxy.upstreamUrls.join(", ");
  app.openAPIRegistry.registerPath({
    method: "post",
    path: "/v1/chat/completions",
    tags: ["proxy"],
    summary: "Chat completion through ctxr: documents reordered, deduplicated and annotated, then forwarded",
    description:
      `Documents come from the "documents" field or are found in message text (XML-tagged, numbered, tool results); the rewritten request goes to the upstream most likely to hold its prefix (${upstreams}).` +
      engineField,
    security,
    request: { body: { required: true, content: { "application/json": { schema: ChatRequest } } } },
    responses: { 200: upstreamAnswer, ...proxyErrors },
  });
  app.openAPIRegistry.registerPath({
    method: "post",
    path: "/v1/completions",
    tags: ["proxy"],
    summary: "Completion through ctxr: documents in the prompt reordered and annotated, then forwarded",
    description: `Documents found in a string prompt (XML-tagged or numbered) are reordered through the live index.${engineField}`,
    security,
    request: { body: { required: true, content: { "application/json": { schema: CompletionRequest } } } },
    responses: { 200: upstreamAnswer, ...proxyErrors },
  });
  const ResponsesRequest = z
    .object({
      model: z.string().optional(),
      input: z.unknown().openapi({ description: "A string or Responses input items; message contents and tool outputs are rewritten as chat's messages are." }),
      instructions: z.string().optional(),
      stream: z.boolean().optional(),
      documents: z.array(Document).optional(),
      ctxr: CtxrOptions.optional(),
    })
    .passthrough()
    .openapi("ProxyResponsesRequest", { description: "An OpenAI Responses API request; any other field (previous_response_id included) is forwarded as sent." });
  app.openAPIRegistry.registerPath({
    method: "post",
    path: "/v1/responses",
    tags: ["proxy"],
    summary: "Responses API through ctxr: documents reordered, deduplicated and annotated as in chat, then forwarded to the upstream's /v1/responses",
    description:
      'The "documents" field is rendered into the last new user input (a string input, or a message item), as chat renders it; the upstream keeps previous_response_id state. ' +
      "Give ctxr.conversation_id to dedup documents across responses chained with previous_response_id (each request shows only its new input)." +
      engineField,
    security,
    request: { body: { required: true, content: { "application/json": { schema: ResponsesRequest } } } },
    responses: { 200: upstreamAnswer, ...proxyErrors },
  });
  const passthroughAnswer = { description: "The upstream's answer (status, headers and body as sent).", content: { "*/*": { schema: z.unknown() } } };
  app.openAPIRegistry.registerPath({
    method: "get",
    path: "/v1/models",
    tags: ["proxy"],
    summary: "Passed through to an upstream unchanged",
    security,
    responses: { 200: passthroughAnswer, 502: proxyErrors[502], 504: proxyErrors[504] },
  });
  for (const method of ["get", "post", "put", "patch", "delete"] as const) {
    app.openAPIRegistry.registerPath({
      method,
      path: "/v1/{path}",
      tags: ["proxy"],
      summary: "Any other /v1/* request: passed through to an upstream unchanged",
      description:
        "Method, path, query, headers (without hop-by-hop headers; the client's credentials replaced by the upstream key when one is set, or dropped when they were for ctxr) and body go to the least busy upstream; the answer comes back as it arrives. " +
        "ctxr's own routes (/v1/reorder, /v1/schedule, /v1/dedup, /v1/evict, /v1/stats, /v1/reset) are never forwarded.",
      security,
      request: { params: z.object({ path: z.string().openapi({ description: "The rest of the path, e.g. embeddings or models/NAME.", example: "embeddings" }) }) },
      responses: { 200: passthroughAnswer, 502: proxyErrors[502], 504: proxyErrors[504] },
    });
    app.openAPIRegistry.registerPath({
      method,
      path: "/{path}",
      tags: ["proxy"],
      summary: "An engine path outside /v1 (/tokenize, /detokenize, /version, ...): passed through unchanged",
      description: "As /v1/{path}. ctxr's own paths (/health, /healthz, /metrics, /openapi.json) are never forwarded: the engine's are at /engine/{path}.",
      security,
      request: { params: z.object({ path: z.string().openapi({ example: "tokenize" }) }) },
      responses: { 200: passthroughAnswer, 502: proxyErrors[502], 504: proxyErrors[504] },
    });
    app.openAPIRegistry.registerPath({
      method,
      path: `${ENGINE_PREFIX}/{path}`,
      tags: ["proxy"],
      summary: "The engine's /{path}, also where ctxr answers that path itself (e.g. /engine/metrics, /engine/health)",
      security,
      request: { params: z.object({ path: z.string().openapi({ example: "metrics" }) }) },
      responses: { 200: passthroughAnswer, 502: proxyErrors[502], 504: proxyErrors[504] },
    });
  }
}
