/**
 * What /v1/responses does with each request field OpenAI (and vLLM's /v1/responses) define:
 * honoured, informational (accepted, echoed, no effect) or refused (a 400 naming the field).
 * vLLM's /v1/responses is the reference for which fields an engine serves; the README's table is
 * this one. A field refused only for some values has `refuse` saying why for that value.
 */
import { firstRefusedField } from "../requestFields.ts";

export type ResponsesFieldStatus = "honoured" | "informational" | "refused";

export interface ResponsesField {
  name: string;
  status: ResponsesFieldStatus;
  /** For a field refused only for some values: why this value is refused (null: it is served). */
  refuse?: (value: unknown) => string | null;
  /** Why a field is refused outright. */
  why?: string;
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);
const absent = (value: unknown) => value === undefined || value === null;

const honoured = (name: string, refuse?: ResponsesField["refuse"]): ResponsesField => ({ name, status: "honoured", ...(refuse ? { refuse } : {}) });
const informational = (name: string, refuse?: ResponsesField["refuse"]): ResponsesField => ({ name, status: "informational", ...(refuse ? { refuse } : {}) });
const refused = (name: string, why: string, refuse?: ResponsesField["refuse"]): ResponsesField => ({ name, status: "refused", why, ...(refuse ? { refuse } : {}) });

/** reasoning: only none (this engine has no reasoning-effort setting). */
function reasoningRefusal(value: unknown): string | null {
  if (absent(value)) return null;
  if (!isObject(value)) return "must be an object";
  for (const [key, setting] of Object.entries(value)) {
    if (absent(setting)) continue;
    if (key === "effort" && setting === "none") continue;
    return `${key}: the served model has no reasoning settings (only {"effort": "none"} is accepted)`;
  }
  return null;
}

export const RESPONSES_FIELDS: readonly ResponsesField[] = [
  honoured("model"),
  honoured("input"),
  honoured("instructions"),
  honoured("max_output_tokens"),
  honoured("temperature"),
  honoured("top_p"),
  honoured("top_k"),
  honoured("seed"),
  honoured("stop"),
  honoured("repetition_penalty"),
  honoured("logit_bias"),
  honoured("ignore_eos"),
  honoured("skip_special_tokens"),
  honoured("include_stop_str_in_output"),
  honoured("cache_salt"),
  honoured("stream"),
  honoured("tools"),
  honoured("tool_choice"),
  honoured("parallel_tool_calls"),
  honoured("text"),
  honoured("previous_response_id"),
  honoured("store"),
  honoured("request_id"),
  honoured("documents"),
  honoured("ctxr"),
  informational("metadata"),
  informational("user"),
  informational("safety_identifier"),
  informational("prompt_cache_key"),
  informational("stream_options"),
  informational("service_tier", (value) => (absent(value) || value === "auto" || value === "default" ? null : 'this server has one service tier ("auto" or "default")')),
  honoured("truncation", (value) => (absent(value) || value === "disabled" ? null : 'only "disabled": a prompt longer than the model holds is a 400')),
  refused("reasoning", "the served model has no reasoning settings", reasoningRefusal),
  refused("background", "background responses are not supported; stream instead", (value) => (absent(value) || value === false ? null : "background responses are not supported; stream instead")),
  refused("include", "no extra output can be included (logprobs, reasoning, tool results are not produced)", (value) => (absent(value) || (Array.isArray(value) && value.length === 0) ? null : "no extra output can be included (logprobs, encrypted reasoning and built-in tool results are not produced)")),
  refused("top_logprobs", "logprobs are not produced on /v1/responses; use /v1/chat/completions", (value) => (absent(value) || value === 0 ? null : "logprobs are not produced on /v1/responses; use /v1/chat/completions")),
  refused("prompt", "prompt templates are not supported"),
  refused("conversation", "conversations are not supported; chain responses with previous_response_id"),
  refused("max_tool_calls", "limits built-in tool calls, which are not supported"),
  refused("priority", "requests are served first come, first served", (value) => (absent(value) || value === 0 ? null : "requests are served first come, first served")),
];

const BY_NAME = new Map(RESPONSES_FIELDS.map((field) => [field.name, field]));

/** The first field of a body that is refused, with why (null: none). Unknown fields are the schema's (strict). */
export function refusedResponsesField(body: Record<string, unknown>): { field: string; why: string } | null {
  return firstRefusedField(body, (name) => BY_NAME.get(name));
}
