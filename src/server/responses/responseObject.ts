/**
 * The `response` object of the Responses API: id resp_..., status, output items, usage in the
 * Responses names (input_tokens, output_tokens, their details) with ctxr's usage.ctxr as in chat,
 * and the request's settings echoed as OpenAI echoes them. Pure.
 */
import type { CtxrUsage } from "../../engine/generationTypes.ts";
import type { OutputItem } from "./responseOutput.ts";
import type { ResponsesBody } from "./responsesSchema.ts";

export type ResponseStatus = "in_progress" | "completed" | "incomplete" | "failed";

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
  ctxr: CtxrUsage;
}

/** Chat usage (openai/usage.ts usageOf) in the Responses names. */
export function responseUsage(usage: {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details?: { reasoning_tokens: number };
  ctxr: CtxrUsage;
}): ResponseUsage {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: usage.prompt_tokens_details.cached_tokens },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: usage.total_tokens,
    ctxr: usage.ctxr,
  };
}

export interface ResponseState {
  id: string;
  createdAt: number;
  model: string;
  status: ResponseStatus;
  output: readonly OutputItem[];
  usage: ResponseUsage | null;
  error?: { code: string; message: string } | null;
}

export function responseObject(state: ResponseState, body: ResponsesBody): Record<string, unknown> {
  return {
    id: state.id,
    object: "response",
    created_at: state.createdAt,
    status: state.status,
    background: false,
    error: state.error ?? null,
    incomplete_details: state.status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    metadata: body.metadata ?? {},
    model: state.model,
    output: state.output,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: null, summary: null },
    service_tier: "default",
    store: body.store ?? true,
    temperature: body.temperature ?? 1,
    text: { format: (body.text as { format?: unknown } | null | undefined)?.format ?? { type: "text" } },
    tool_choice: body.tool_choice ?? "auto",
    tools: body.tools ?? [],
    top_p: body.top_p ?? 1,
    truncation: "disabled",
    usage: state.usage,
    user: body.user ?? null,
  };
}
