/**
 * The OpenAI-compatible generation API of `ctxr serve --model DIR`, over the built-in engine
 * (src/engine/generationEngine.ts), mounted with its OpenAPI descriptions:
 *
 * - POST /v1/chat/completions: messages through the model's chat template (chatCompletionsRoute.ts);
 * - POST /v1/completions: a prompt string or token ids, or several: one choice each (completionsRoute.ts);
 * - GET /v1/models and GET /v1/models/{id} (modelsRoutes.ts).
 *
 * Both generation routes answer as one JSON object, or with "stream": true as server-sent events
 * (`data: {chunk}` lines, then `data: [DONE]`). A client that disconnects cancels its request
 * (its KV blocks are freed at the next step). Without --model (and without --upstream) these
 * paths answer 404 saying how to load a model (modelsRoutes.ts: mountNoModelRoutes).
 */
import { jsonDepthLimit } from "../../http/jsonDepthLimit.ts";
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { MiddlewareHandler } from "hono";
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import { DEFAULT_LIMITS } from "../../http/limits.ts";
import { createOpenAiSchemas } from "../openaiSchemas.ts";
import { DEFAULT_SSE_KEEP_ALIVE_MS } from "../../http/sseKeepAlive.ts";
import { chatCompletionsHandler } from "./chatCompletionsRoute.ts";
import { completionsHandler } from "./completionsRoute.ts";
import type { GenerationHandlerOptions } from "./handlerOptions.ts";
import { mountModelsRoutes } from "./modelsRoutes.ts";

export const GENERATION_PATHS: ReadonlyMap<string, string[]> = new Map([
  ["/v1/chat/completions", ["POST"]],
  ["/v1/completions", ["POST"]],
  ["/v1/responses", ["POST"]],
  ["/v1/models", ["GET", "HEAD"]],
]);

export interface GenerationRouteOptions {
  /** Run before validation on the POST routes (API key, body limit). */
  middleware: MiddlewareHandler[];
  secured: boolean;
  errorSchema: z.ZodType;
  /** Levels of JSON nesting a body may have, ignored fields included (default DEFAULT_LIMITS.maxJsonDepth). */
  maxJsonDepth?: number;
  /** Where failed streams are logged (default: stderr). */
  log?: (text: string) => void;
  /** A stream that wrote nothing for this long writes a keep-alive comment (default DEFAULT_SSE_KEEP_ALIVE_MS). */
  sseKeepAliveMs?: number;
}

export function mountGenerationRoutes(app: OpenAPIHono, engine: GenerationEngine, options: GenerationRouteOptions): void {
  const schemas = createOpenAiSchemas();
  const handlerOptions: GenerationHandlerOptions = {
    stream: { log: options.log ?? ((text) => void process.stderr.write(text)), keepAliveMs: options.sseKeepAliveMs ?? DEFAULT_SSE_KEEP_ALIVE_MS },
  };
  const withDepthLimit = [...options.middleware, jsonDepthLimit(options.maxJsonDepth ?? DEFAULT_LIMITS.maxJsonDepth)];
  const security: Record<string, string[]>[] | undefined = options.secured ? [{ bearerAuth: [] }, { apiKeyHeader: [] }] : undefined;
  const error = (description: string) => ({ description, content: { "application/json": { schema: options.errorSchema } } });
  const errors = {
    400: error('Invalid input ("field" names it): a wrong type or value, an unsupported option, a prompt longer than the model and KV cache hold.'),
    ...(options.secured ? { 401: error("Missing or wrong API key.") } : {}),
    404: error("The request names another model than the one served."),
    413: error("The request body is larger than the server's --max-body-bytes."),
    429: error("--max-waiting-requests requests are already waiting for the engine; retry after the Retry-After seconds."),
    500: error("The model runner failed (it is restarted; the request was not completed)."),
    503: error("The server is shutting down."),
    504: error('The request\'s deadline ("ctxr": {"deadline_ms"}, or the server\'s --request-timeout) passed before it finished; it was cancelled.'),
  };
  const streamed = (schema: z.ZodType, what: string) => ({
    description: `${what}, or with "stream": true server-sent events: data: {chunk} lines (choices[].delta / choices[].text), then data: [DONE].`,
    content: { "application/json": { schema }, "text/event-stream": { schema: z.string() } },
  });

  const chatRoute = createRoute({
    method: "post",
    path: "/v1/chat/completions",
    tags: ["generation"],
    summary: "Chat completion with the served model (OpenAI-compatible)",
    middleware: withDepthLimit,
    security,
    request: { body: { required: true, content: { "application/json": { schema: schemas.ChatCompletionRequest } } } },
    responses: { 200: streamed(schemas.ChatCompletionResponse, "The completion"), ...errors },
  });
  const completionRoute = createRoute({
    method: "post",
    path: "/v1/completions",
    tags: ["generation"],
    summary: "Text completion with the served model (OpenAI-compatible); the prompt may be token ids",
    middleware: withDepthLimit,
    security,
    request: { body: { required: true, content: { "application/json": { schema: schemas.CompletionRequest } } } },
    responses: { 200: streamed(schemas.CompletionResponse, "The completion (one choice per prompt)"), ...errors },
  });
  app.openapi(chatRoute, chatCompletionsHandler(engine, handlerOptions) as never);
  app.openapi(completionRoute, completionsHandler(engine, handlerOptions) as never);
  mountModelsRoutes(app, engine, schemas, options.errorSchema);
}
