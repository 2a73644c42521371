/**
 * GET /v1/models (the served model) and GET /v1/models/{id} (its card; 404 for any other id), and
 * without a model, the generation paths answering how to load one.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import { errorResponse } from "../../http/errors.ts";
import type { createOpenAiSchemas } from "../openaiSchemas.ts";

/** GET /v1/models/{id}: the served model's card by id. */
export const MODEL_PATH_PREFIX = "/v1/models/";

export function mountModelsRoutes(app: OpenAPIHono, engine: GenerationEngine, schemas: ReturnType<typeof createOpenAiSchemas>, errorSchema: z.ZodType): void {
  const modelsRoute = createRoute({
    method: "get",
    path: "/v1/models",
    tags: ["generation"],
    summary: "The served model",
    responses: { 200: { description: "One model.", content: { "application/json": { schema: schemas.ModelList } } } },
  });
  const modelCard = () => ({ id: engine.modelId, object: "model" as const, created: engine.created, owned_by: "ctxr", max_model_len: engine.maxModelLen });
  app.openapi(modelsRoute, (c) => c.json({ object: "list" as const, data: [modelCard()] }, 200));

  // Served model names may hold "/" (--served-model-name org/name): the id is the rest of the path, sent with "/" or "%2F".
  app.get(`${MODEL_PATH_PREFIX}:model{.+}`, (c) => {
    const id = c.req.param("model");
    if (id === engine.modelId) return c.json(modelCard(), 200);
    return errorResponse(c, 404, `model: model ${JSON.stringify(id)} does not exist; this server serves ${JSON.stringify(engine.modelId)}`, "model", undefined, "model_not_found");
  });
  app.openAPIRegistry.registerPath({
    method: "get",
    path: "/v1/models/{model}",
    tags: ["generation"],
    summary: "The served model's card, by id (OpenAI's models.retrieve)",
    request: { params: z.object({ model: z.string().openapi({ description: 'The model id; one holding "/" may be sent as it is or with "%2F".' }) }) },
    responses: {
      200: { description: "The model.", content: { "application/json": { schema: schemas.Model } } },
      404: { description: "No model of that id is served.", content: { "application/json": { schema: errorSchema } } },
    },
  });
}

/** Without --model (and without --upstream): the generation paths say how to get a model. */
export function mountNoModelRoutes(app: OpenAPIHono): void {
  const answer = (c: Context) =>
    errorResponse(c, 404, `${c.req.path}: no model is loaded; start ctxr serve with --model DIR to generate (or --upstream URL to proxy an OpenAI-compatible engine)`, "");
  app.post("/v1/chat/completions", answer);
  app.post("/v1/completions", answer);
  app.post("/v1/responses", answer);
  app.get("/v1/models", answer);
  app.get(`${MODEL_PATH_PREFIX}*`, answer);
}
