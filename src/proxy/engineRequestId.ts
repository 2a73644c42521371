/**
 * The request id an engine reports back (in its responses and KV events) is
 * set by ctxr in the field each engine accepts, so that evictions the engine
 * reports name the contexts ctxr recorded: vLLM takes `request_id` (and reports
 * "chatcmpl-<id>"/"cmpl-<id>-0-<hex>", which /v1/evict understands), SGLang
 * takes `rid`. llama.cpp and hosted OpenAI-style APIs take none. vLLM takes an
 * `X-Request-Id` header before the body field (gateways add one to every
 * request), so ctxr sets that header to the same id.
 */
export const ENGINES = ["openai", "vllm", "sglang", "llamacpp"] as const;
export type Engine = (typeof ENGINES)[number];

/** The body field that carries the request id for an engine, or null. */
export function requestIdField(engine: Engine): string | null {
  switch (engine) {
    case "vllm":
      return "request_id";
    case "sglang":
      return "rid";
    default:
      return null;
  }
}

/** The header that overrides the body field for an engine, or null. */
export function requestIdHeader(engine: Engine): string | null {
  return engine === "vllm" ? "x-request-id" : null;
}

/** Sets the engine's request-id field of a JSON body (in place; a client's own value is replaced). */
export function setEngineRequestId(body: Record<string, unknown>, engine: Engine, requestId: string | null): void {
  const field = requestIdField(engine);
  if (field === null || requestId === null) return;
  body[field] = requestId;
}
