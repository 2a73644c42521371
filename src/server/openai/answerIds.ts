/** The ids an answer hands out: the answer's own and each tool call's. */
import type { ChatCompletionBody, CompletionBody } from "../openaiSchemas.ts";

export function requestId(prefix: string): string {
  return `${prefix}-${crypto.randomUUID().replace(/-/g, "")}`;
}

/** The answer's id: from the request's request_id when it gives one (vLLM), else random. */
export function answerId(prefix: string, body: ChatCompletionBody | CompletionBody): string {
  return body.request_id != null ? `${prefix}-${body.request_id}` : requestId(prefix);
}

export function toolCallId(): string {
  return `call_${crypto.randomUUID().replace(/-/g, "").slice(0, 24)}`;
}
