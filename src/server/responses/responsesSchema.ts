/**
 * zod schema of POST /v1/responses (OpenAI's Responses API): strict at the top level (an unknown
 * field is a 400 naming it); `input` items, tools, tool_choice and text.format are read by
 * responsesInput.ts, which names the offending part. The answer's schema is documentation only.
 */
import { z } from "@hono/zod-openapi";
import { MAX_DOCUMENTS, MAX_STOP_STRINGS } from "../openaiSchemas.ts";
import { RESPONSES_FIELDS } from "./responsesFields.ts";

/** Items in one request's input (after a previous response's are added, the prompt's length is what bounds it). */
export const MAX_INPUT_ITEMS = 4096;

export function createResponsesSchemas() {
  const nullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();
  const refusedFields = Object.fromEntries(
    RESPONSES_FIELDS.filter((field) => field.status === "refused").map((field) => [field.name, z.unknown().optional().openapi({ description: `Refused${field.refuse ? " unless absent or its default" : ""}: ${field.why}.` })]),
  );

  const Document = z.strictObject({ id: z.union([z.string(), z.number()]).optional(), title: z.string().optional(), text: z.string().min(1) });

  const ResponsesRequest = z
    .object({
      model: nullable(z.string()).openapi({ description: "The served model's id (GET /v1/models); optional." }),
      input: z
        .union([z.string(), z.array(z.record(z.string(), z.unknown())).min(1).max(MAX_INPUT_ITEMS)], {
          error: (issue) => (issue.code !== "invalid_union" ? undefined : issue.input === undefined ? "required" : "expected a string or a non-empty array of input items"),
        })
        .openapi({
          description:
            'A user message (a string), or items: messages {role, content} (content a string or input_text / output_text parts), {"type": "function_call", call_id, name, arguments}, {"type": "function_call_output", call_id, output}, {"type": "item_reference", id} (an item of a stored response).',
        }),
      instructions: nullable(z.string()).openapi({ description: "A system message put first (not carried over to responses that continue this one)." }),
      max_output_tokens: nullable(z.int().min(1)).openapi({ description: "Most tokens to generate." }),
      temperature: nullable(z.number().min(0).max(2)).openapi({ description: "Sampling temperature, 0 (greedy) to 2; default 1." }),
      top_p: nullable(z.number().gt(0).max(1)).openapi({ description: "Nucleus sampling mass in (0, 1]; default 1." }),
      top_k: nullable(z.int().min(-1)).openapi({ description: "Extension (vLLM): sample among the k most likely tokens (0 or -1: all)." }),
      seed: nullable(z.int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER)).openapi({ description: "Extension (vLLM): same seed, same parameters and input: same tokens." }),
      stop: nullable(z.union([z.string(), z.array(z.string()).max(MAX_STOP_STRINGS)])).openapi({ description: "Extension (vLLM): stop strings." }),
      repetition_penalty: nullable(z.number().gt(0)).openapi({ description: "Extension (vLLM)." }),
      logit_bias: nullable(z.record(z.string().regex(/^\d+$/, "keys are token ids"), z.number().min(-100).max(100))).openapi({ description: "Extension (vLLM): token id → bias." }),
      ignore_eos: nullable(z.boolean()).openapi({ description: "Extension (vLLM)." }),
      skip_special_tokens: nullable(z.boolean()).openapi({ description: "Extension (vLLM)." }),
      include_stop_str_in_output: nullable(z.boolean()).openapi({ description: "Extension (vLLM)." }),
      cache_salt: nullable(z.string().min(1)).openapi({ description: "Extension (vLLM): only requests with the same salt share cached prompt blocks." }),
      request_id: nullable(z.string().min(1).max(128)).openapi({ description: "Extension (vLLM): the response's id is resp_ followed by it." }),
      stream: nullable(z.boolean()).openapi({ description: "Answer as server-sent events (event: TYPE / data: {event}), response.created … response.completed." }),
      stream_options: nullable(z.record(z.string(), z.unknown())).openapi({ description: "Accepted, not used." }),
      tools: nullable(z.array(z.unknown())).openapi({ description: 'Functions the model may call: [{"type": "function", "name", "description", "parameters", "strict"}] (built-in tools are refused).' }),
      tool_choice: nullable(z.unknown()).openapi({ description: '"auto" (default), "none", "required", or {"type": "function", "name"}.' }),
      parallel_tool_calls: nullable(z.boolean()).openapi({ description: "Whether the answer may hold several calls (default true)." }),
      text: nullable(z.record(z.string(), z.unknown())).openapi({ description: 'text.format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "name", "schema", "strict"}; the text then follows the schema.' }),
      previous_response_id: nullable(z.string().min(1).max(256)).openapi({ description: "Continue a stored response: its input and output come before this input (404 when unknown or forgotten)." }),
      store: nullable(z.boolean()).openapi({ description: "Keep this response (in memory, under a byte budget) so that previous_response_id can continue it; default true." }),
      metadata: nullable(z.record(z.string(), z.string())).openapi({ description: "Echoed in the response." }),
      user: nullable(z.string()).openapi({ description: "Echoed in the response." }),
      safety_identifier: nullable(z.string()).openapi({ description: "Accepted, not used." }),
      prompt_cache_key: nullable(z.string()).openapi({ description: "Accepted, not needed: prefix caching is automatic." }),
      service_tier: nullable(z.string()).openapi({ description: '"auto" or "default" (one tier).' }),
      truncation: nullable(z.string()).openapi({ description: 'Only "disabled".' }),
      documents: nullable(z.array(Document).max(MAX_DOCUMENTS)).openapi({ description: "Extension: documents for the last user message, as in /v1/chat/completions (each a chunk whose KV is cached and reused at any position)." }),
      ctxr: nullable(z.record(z.string(), z.unknown())).openapi({ description: "Extension: KV-cache management options, as in /v1/chat/completions." }),
      ...refusedFields,
    })
    .strict()
    .openapi("ResponsesRequest", { example: { model: "tiny", input: "Hello!", max_output_tokens: 16, temperature: 0 } });

  const OutputItem = z
    .object({ type: z.enum(["reasoning", "message", "function_call"]), id: z.string(), status: z.string() })
    .passthrough()
    .openapi("ResponseOutputItem", { description: 'The model\'s reasoning {content: [{type: "reasoning_text", text}]} (with a reasoning parser), a message {role: "assistant", content: [{type: "output_text", text}]} or a function call {call_id, name, arguments}.' });
  const Response = z
    .object({
      id: z.string(),
      object: z.literal("response"),
      created_at: z.int(),
      status: z.enum(["completed", "incomplete", "failed"]),
      model: z.string(),
      output: z.array(OutputItem),
      usage: z
        .object({
          input_tokens: z.int(),
          input_tokens_details: z.object({ cached_tokens: z.int() }),
          output_tokens: z.int(),
          output_tokens_details: z.object({ reasoning_tokens: z.int() }),
          total_tokens: z.int(),
          ctxr: z.record(z.string(), z.unknown()).optional().openapi({ description: "As usage.ctxr of /v1/chat/completions." }),
        })
        .nullable(),
    })
    .passthrough()
    .openapi("Response");

  return { ResponsesRequest, Response };
}

export type ResponsesBody = z.infer<ReturnType<typeof createResponsesSchemas>["ResponsesRequest"]>;
