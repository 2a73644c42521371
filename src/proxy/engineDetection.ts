/**
 * Which engine an upstream is, from its own endpoints (no I/O here: upstreamMonitor.ts asks them):
 *  - vLLM: GET /v1/models lists models `"owned_by": "vllm"`; GET /version gives `{"version"}`.
 *  - SGLang: GET /get_model_info (`{"model_path", "is_generation", ...}`) and GET
 *    /get_server_info (renamed /server_info in newer releases; its server arguments and `version`).
 *  - llama.cpp's llama-server: GET /props (`default_generation_settings`, `total_slots`,
 *    `build_info`) beside GET /health (`{"status": "ok"}`).
 *  - ctxr serve --model: GET /v1/models lists models `"owned_by": "ctxr"`.
 * Anything else is a plain OpenAI-compatible API.
 */
import type { Engine } from "./engineRequestId.ts";

/** The paths asked, in order; an answer is its parsed JSON body when the status is 200, else undefined. */
export const DETECTION_PATHS = ["/v1/models", "/version", "/get_model_info", "/get_server_info", "/server_info", "/props", "/health"] as const;
export type DetectionPath = (typeof DETECTION_PATHS)[number];
export type DetectionAnswers = Partial<Record<DetectionPath, unknown>>;

export interface DetectedEngine {
  /** How ctxr talks to it (the request-id field). */
  engine: Engine;
  /** Its name for people: "vLLM", "SGLang", "llama.cpp", "ctxr", or null when not recognised. */
  name: string | null;
  version: string | null;
}

export function detectEngine(answers: DetectionAnswers): DetectedEngine {
  const owners = modelOwners(answers["/v1/models"]);
  if (owners.has("vllm")) return { engine: "vllm", name: "vLLM", version: stringField(answers["/version"], "version") };
  const serverInfo = answers["/get_server_info"] ?? answers["/server_info"];
  const modelInfo = answers["/get_model_info"];
  if (isObject(modelInfo) && "model_path" in modelInfo && ("is_generation" in modelInfo || isObject(serverInfo))) {
    return { engine: "sglang", name: "SGLang", version: stringField(serverInfo, "version") };
  }
  const props = answers["/props"];
  if (isObject(props) && ("default_generation_settings" in props || "total_slots" in props)) {
    return { engine: "llamacpp", name: "llama.cpp", version: stringField(props, "build_info") };
  }
  if (owners.has("ctxr")) return { engine: "openai", name: "ctxr", version: null };
  return { engine: "openai", name: null, version: null };
}

/** "vLLM 0.9.1", "llama.cpp b8681", "SGLang". */
export function engineLabel(detected: DetectedEngine): string {
  return detected.name === null ? "an OpenAI-compatible API" : detected.version === null ? detected.name : `${detected.name} ${detected.version}`;
}

function modelOwners(models: unknown): Set<string> {
  const owners = new Set<string>();
  if (!isObject(models) || !Array.isArray(models.data)) return owners;
  for (const model of models.data) if (isObject(model) && typeof model.owned_by === "string") owners.add(model.owned_by);
  return owners;
}

function stringField(value: unknown, field: string): string | null {
  if (!isObject(value)) return null;
  const found = value[field];
  return typeof found === "string" && found !== "" ? found.slice(0, 64) : null;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}
