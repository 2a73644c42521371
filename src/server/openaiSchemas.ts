/**
 * zod schemas of the OpenAI-compatible generation API served with --model:
 * POST /v1/chat/completions, POST /v1/completions and GET /v1/models. Requests
 * are validated with them (400 naming the field). They are strict: every field
 * OpenAI and vLLM define is declared (requestFields.ts says what is done with
 * each; the routes refuse the ones the engine cannot honour), and an unknown one
 * is a 400. Responses are documentation only.
 */
import { z } from "@hono/zod-openapi";
import { REQUEST_FIELDS, type Endpoint } from "./requestFields.ts";

/** Most stop strings a request may give. */
export const MAX_STOP_STRINGS = 16;
/** Most top alternatives per token (OpenAI's chat limit). */
export const MAX_TOP_LOGPROBS = 20;
/** Most prompts in one /v1/completions request. */
export const MAX_PROMPTS = 64;
/** Most documents (chunks) in one request. */
export const MAX_DOCUMENTS = 256;
/** Longest per-request deadline ("ctxr": {"deadline_ms"}): a day. */
export const MAX_DEADLINE_MS = 86_400_000;

/**
 * The fields of an endpoint the engine refuses (requestFields.ts) that the schema declares only so
 * that the route can answer why ("suffix: fill-in-the-middle needs…") instead of "unknown field".
 */
function declaredOnly(endpoint: Endpoint, also: readonly string[]): Record<string, z.ZodOptional<z.ZodUnknown>> {
  const entries = REQUEST_FIELDS.filter((field) => field.on.includes(endpoint) && (field.status === "refused" || also.includes(field.name)) && !DECLARED.has(field.name));
  return Object.fromEntries(entries.map((field) => [field.name, z.unknown().optional().openapi({ description: `Refused: ${field.why ?? "only its default value is served"}.` })]));
}

/** OpenAI's reasoning_effort values that reasoning models' chat templates take (gpt-oss's). */
export const REASONING_EFFORTS = ["low", "medium", "high"] as const;

/** Fields declared with their own types (a refused value of theirs is checked by the route). */
const DECLARED = new Set(["suffix"]);

export function createOpenAiSchemas() {
  const nullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

  const Stop = nullable(
    z.union([z.string(), z.array(z.string()).max(MAX_STOP_STRINGS)], {
      error: (issue) => (issue.code === "invalid_union" ? `expected a string or an array of at most ${MAX_STOP_STRINGS} strings` : undefined),
    }),
  ).openapi({ description: "Stop strings: the text ends just before the first one generated (it is not returned)." });

  const StreamOptions = nullable(
    z
      .object({
        include_usage: z.boolean().optional().openapi({ description: "Send a last chunk with usage (and empty choices) before [DONE]." }),
        continuous_usage_stats: z
          .literal(false)
          .optional()
          .openapi({ description: "vLLM's usage in every chunk: only false (usage comes in the last chunk with include_usage)." }),
      })
      .strict(),
  );

  const sampling = {
    model: z.string().optional().openapi({ description: "The served model's id (GET /v1/models); optional." }),
    stream: nullable(z.boolean()).openapi({ description: "Answer as server-sent events: data: {chunk} lines, then data: [DONE]." }),
    stream_options: StreamOptions,
    max_tokens: nullable(z.int().min(1)).openapi({ description: "Most tokens to generate." }),
    temperature: nullable(z.number().min(0).max(2)).openapi({ description: "Sampling temperature, 0 (greedy) to 2; default 1." }),
    top_p: nullable(z.number().gt(0).max(1)).openapi({ description: "Nucleus sampling mass in (0, 1]; default 1." }),
    top_k: nullable(z.int().min(-1)).openapi({ description: "Extension: sample among the k most likely tokens (0 or -1: all)." }),
    seed: nullable(z.int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER)).openapi({ description: "Same seed, same parameters and prompt: same tokens." }),
    stop: Stop,
    n: nullable(z.int().min(1)).openapi({ description: "Choices per prompt (at most 64); the choices share the prompt's KV: the first computes it, the others start from its cached blocks. With a seed, choice k samples with seed + k." }),
    presence_penalty: nullable(z.number().min(-2).max(2)).openapi({ description: "Subtracted from the logit of every token already in the output, −2 to 2 (OpenAI)." }),
    frequency_penalty: nullable(z.number().min(-2).max(2)).openapi({ description: "Subtracted from a token's logit once per occurrence in the output so far, −2 to 2 (OpenAI)." }),
    repetition_penalty: nullable(z.number().gt(0)).openapi({ description: "Extension (vLLM): tokens of the prompt and output have positive logits divided by it, others multiplied (1: off)." }),
    logit_bias: nullable(z.record(z.string().regex(/^\d+$/, "keys are token ids"), z.number().min(-100).max(100))).openapi({ description: "Token id → bias (−100 to 100) added to its logit before sampling." }),
    min_p: nullable(z.number().min(0).max(1)).openapi({ description: "Extension (vLLM): drop tokens less likely than min_p × the most likely one (after temperature); 0: off." }),
    stop_token_ids: nullable(z.array(z.int().min(0)).max(MAX_STOP_STRINGS)).openapi({ description: "Extension (vLLM): token ids that end the text, like the end-of-sequence token." }),
    include_stop_str_in_output: nullable(z.boolean()).openapi({ description: "Extension (vLLM): the stop string or stop token that ended the text is part of it." }),
    min_tokens: nullable(z.int().min(0)).openapi({ description: "Extension (vLLM): tokens generated before a stop token or stop string may end the text." }),
    truncate_prompt_tokens: nullable(z.int().min(1)).openapi({ description: "Extension (vLLM): keep only the prompt's last this many tokens." }),
    allowed_token_ids: nullable(z.array(z.int().min(0)).min(1)).openapi({ description: "Extension (vLLM): the only tokens that may be generated." }),
    cache_salt: nullable(z.string().min(1)).openapi({ description: "Extension (vLLM): only requests with the same salt share cached prompt blocks." }),
    guided_decoding_backend: nullable(z.string()).openapi({ description: 'Extension (vLLM): "xgrammar" or "auto" (the only grammar engine).' }),
    request_id: nullable(z.string().min(1).max(128)).openapi({ description: "Extension (vLLM): the answer's id is built from it." }),
    user: z.string().optional(),
    response_format: nullable(z.unknown()).openapi({ description: 'Structured output: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}; the text then follows the JSON grammar or the schema.' }),
    guided_json: nullable(z.unknown()).openapi({ description: "Extension (vLLM): a JSON schema (object or string) the text follows." }),
    guided_regex: nullable(z.unknown()).openapi({ description: "Extension (vLLM): a regular expression the text matches." }),
    guided_choice: nullable(z.unknown()).openapi({ description: "Extension (vLLM): the text is one of these strings." }),
    guided_grammar: nullable(z.unknown()).openapi({ description: "Extension (vLLM): an EBNF grammar (xgrammar's dialect, root rule `root`) the text follows." }),
    structured_outputs: nullable(z.unknown()).openapi({ description: "Extension (vLLM): one of json, regex, choice, grammar, as the guided_* fields." }),
    ignore_eos: nullable(z.boolean()).openapi({ description: "Extension (vLLM): keep generating past the end-of-sequence token." }),
    skip_special_tokens: nullable(z.boolean()).openapi({ description: "Extension (vLLM): leave special tokens out of the text (default true)." }),
    ctxr: nullable(
      z
        .object({
          policy: z.enum(["prophet", "cachecraft", "epic", "none", "prefix", "full"]).optional().openapi({ description: "How cached chunk KV is reused: prophet (ProphetKV, default), cachecraft (Cache-Craft), epic (EPIC's LegoLink: the first tokens of every reused chunk), none (reuse as is), prefix (exact prefix only), full (no cache)." }),
          recompute_ratio: z.number().min(0).max(1).optional().openapi({ description: "Share of the reused chunks' tokens to recompute (default 0.2)." }),
          kv_budget: z.number().gt(0).max(1).optional().openapi({ description: "Sparse decode (CHESS): the share of the KV cache each decode step reads; 1 or absent: all." }),
          deadline_ms: z
            .int()
            .min(1)
            .max(MAX_DEADLINE_MS)
            .optional()
            .openapi({ description: "Cancel the request if it has not finished this many milliseconds after it arrived (its KV blocks are freed): a 504, or when streamed an error event then [DONE]. The server's --request-timeout, when set, caps it." }),
        })
        .strict(),
    ).openapi({ description: "Extension: KV-cache management and scheduling options of this request." }),
  };

  const Document = z.strictObject({
    id: z.union([z.string(), z.number()]).optional(),
    title: z.string().optional(),
    text: z.string().min(1),
  });

  const Message = z
    .object({
      role: z.string().min(1).openapi({ description: "system, developer, user or assistant (what the model's chat template accepts)." }),
      content: z.unknown().openapi({ description: "A string or an array of text parts ({type: \"text\", text})." }),
    })
    .passthrough()
    .openapi("ChatMessage");

  const ChatCompletionRequest = z
    .object({
      messages: z.array(Message).min(1).openapi({ description: "The conversation, rendered with the model's chat template." }),
      ...sampling,
      max_completion_tokens: nullable(z.int().min(1)).openapi({ description: "Most tokens to generate (OpenAI's newer name of max_tokens)." }),
      logprobs: nullable(z.boolean()).openapi({ description: "Return each generated token's log-probability." }),
      top_logprobs: nullable(z.int().min(0).max(MAX_TOP_LOGPROBS)).openapi({ description: `With logprobs: this many most likely alternatives per token (0 to ${MAX_TOP_LOGPROBS}).` }),
      reasoning_effort: nullable(z.enum(REASONING_EFFORTS)).openapi({ description: 'How long the model reasons ("low", "medium", "high"): the chat template\'s reasoning_effort variable (gpt-oss). A 400 for a model whose template has no such setting.' }),
      chat_template_kwargs: nullable(z.record(z.string(), z.unknown())).openapi({ description: 'Extension (vLLM): more variables for the chat template; {"enable_thinking": false} turns a thinking model\'s reasoning off (a boolean).' }),
      tools: nullable(z.array(z.unknown())).openapi({ description: 'Functions the model may call: [{"type": "function", "function": {"name", "description", "parameters"}}], rendered through the chat template\'s tools variable.' }),
      tool_choice: nullable(z.unknown()).openapi({ description: '"none" (calls not parsed), "auto" (default: calls parsed, their arguments held to the schema), "required" (the answer is calls) or {"type": "function", "function": {"name"}} (one call of it).' }),
      parallel_tool_calls: nullable(z.boolean()).openapi({ description: "Whether an answer may hold several calls (default true)." }),
      add_generation_prompt: nullable(z.boolean()).openapi({ description: "Extension (vLLM): open an assistant turn at the end of the prompt (default true)." }),
      metadata: nullable(z.record(z.string(), z.unknown())).openapi({ description: "Accepted, not used." }),
      safety_identifier: nullable(z.string()).openapi({ description: "Accepted, not used." }),
      prompt_cache_key: nullable(z.string()).openapi({ description: "Accepted, not needed: prefix caching is automatic." }),
      service_tier: nullable(z.string()).openapi({ description: '"auto" or "default" (one tier).' }),
      store: nullable(z.boolean()).openapi({ description: "Only false: completions are not stored." }),
      ...declaredOnly("chat", ["echo"]),
      documents: nullable(z.array(Document).max(MAX_DOCUMENTS)).openapi({
        description: "Extension: documents for the last user message (rendered as <document> elements before its text). Each is a chunk whose KV is cached and reused at any position.",
      }),
    })
    .strict()
    .openapi("ChatCompletionRequest", {
      example: { model: "tiny", messages: [{ role: "user", content: "Hello!" }], max_tokens: 16, temperature: 0 },
    });

  const TokenIds = z.array(z.int().min(0)).min(1);
  const Prompt = z
    .union([z.string(), z.array(z.string()).min(1).max(MAX_PROMPTS), TokenIds, z.array(TokenIds).min(1).max(MAX_PROMPTS)], {
      error: (issue) =>
        issue.code !== "invalid_union"
          ? undefined
          : issue.input === undefined
            ? "required"
            : "expected a string, an array of strings, an array of (at least one) token ids or an array of arrays of token ids",
    })
    .openapi({ description: `A prompt (a string or an array of token ids) or up to ${MAX_PROMPTS} of them (one choice each).` });

  const CompletionRequest = z
    .object({
      prompt: Prompt.optional(),
      segments: nullable(z.array(z.string().min(1)).min(1).max(MAX_DOCUMENTS + 1)).openapi({
        description: "Extension, instead of prompt: the prompt as segments; every segment but the last is a chunk whose KV is cached and reused at any position, the last is the question.",
      }),
      ...sampling,
      max_tokens: nullable(z.int().min(1)).openapi({ description: "Most tokens to generate; default 16." }),
      logprobs: nullable(z.int().min(0).max(MAX_TOP_LOGPROBS)).openapi({ description: `Return each token's log-probability and this many most likely alternatives (0 to ${MAX_TOP_LOGPROBS}).` }),
      echo: nullable(z.boolean()).openapi({ description: "The prompt's text comes before each choice's text (with logprobs: the prompt's tokens too, the first with null)." }),
      suffix: nullable(z.string()).openapi({ description: "Refused: fill-in-the-middle needs a model with a FIM template." }),
      best_of: nullable(z.int().min(1)).openapi({ description: "Generate this many candidates per prompt (at least n, at most 64) and return the n with the highest log probability per token; not with stream when larger than n." }),
      ...declaredOnly("completions", []),
    })
    .strict()
    .openapi("CompletionRequest", { example: { model: "tiny", prompt: "Hello, ctxr!", max_tokens: 8, temperature: 0 } });

  const CtxrUsage = z
    .object({
      prompt_tokens_prefix_reused: z.int().openapi({ description: "Prompt tokens whose KV came from an exact cached prefix." }),
      prompt_tokens_chunk_reused: z.int().openapi({ description: "Prompt tokens whose KV came from a cached chunk at another position and was not recomputed." }),
      prompt_tokens_recomputed: z.int().openapi({ description: "Tokens of reused chunks that were recomputed." }),
      prompt_tokens_computed: z.int().openapi({ description: "Prompt tokens computed from scratch." }),
      tier_hits: z.object({ device: z.int(), host: z.int(), disk: z.int(), remote: z.int().optional().openapi({ description: "With --kv-remote: segments fetched from the shared remote tier." }) }).optional().openapi({ description: "Cached segments by the tier they came from." }),
      policy: z.string().optional(),
      recompute_ratio: z
        .number()
        .optional()
        .openapi({ description: "The recompute ratio the reused chunks got (policies that take one): the request's, the target's (--reuse-target-agreement) or --recompute-ratio." }),
      chunks_unscored: z
        .int()
        .optional()
        .openapi({ description: "Reused chunks whose variant had no measured KV shift yet (it is measured in the engine's idle time): their choice and cachecraft's recompute set used the attention scores." }),
      ttft_ms: z.number().openapi({ description: "Time from arrival to the first token." }),
      queue_ms: z.number().openapi({ description: "Time the request waited in the engine's queue before it was first scheduled." }),
      sparse_decode_steps: z.int().optional(),
      sparse_reconstructions: z.int().optional(),
    })
    .openapi("CtxrUsage");
  const Usage = z
    .object({
      prompt_tokens: z.int(),
      completion_tokens: z.int(),
      total_tokens: z.int(),
      prompt_tokens_details: z
        .object({ cached_tokens: z.int().openapi({ description: "Prompt tokens whose KV was reused from the cache as an exact prefix (equals ctxr.prompt_tokens_prefix_reused)." }) })
        .optional(),
      completion_tokens_details: z
        .object({ reasoning_tokens: z.int().openapi({ description: "Generated tokens of the answers' reasoning, </think> included." }) })
        .optional()
        .openapi({ description: "With a reasoning parser (chat)." }),
      ctxr: CtxrUsage.optional(),
    })
    .openapi("Usage");

  const TopLogprob = z.object({ token: z.string(), logprob: z.number(), bytes: z.array(z.int()).nullable() });
  const ChatLogprobs = z
    .object({ content: z.array(TopLogprob.extend({ top_logprobs: z.array(TopLogprob) })) })
    .nullable()
    .openapi("ChatLogprobs");

  const ChatCompletionResponse = z
    .object({
      id: z.string(),
      object: z.literal("chat.completion"),
      created: z.int(),
      model: z.string(),
      choices: z.array(
        z.object({
          index: z.int(),
          message: z.object({
            role: z.literal("assistant"),
            content: z.string().nullable(),
            reasoning_content: z.string().nullable().optional().openapi({ description: "With a reasoning parser (--reasoning-parser): the model's <think> reasoning, apart from the content (null: none)." }),
            tool_calls: z.array(z.object({ id: z.string(), type: z.literal("function"), function: z.object({ name: z.string(), arguments: z.string() }) })).optional(),
          }),
          logprobs: ChatLogprobs,
          finish_reason: z.enum(["stop", "length", "tool_calls"]),
        }),
      ),
      usage: Usage,
    })
    .openapi("ChatCompletionResponse");

  const CompletionLogprobs = z
    .object({
      tokens: z.array(z.string()),
      token_logprobs: z.array(z.number().nullable()),
      top_logprobs: z.array(z.record(z.string(), z.number()).nullable()),
      text_offset: z.array(z.int()),
    })
    .nullable()
    .openapi("CompletionLogprobs");

  const CompletionResponse = z
    .object({
      id: z.string(),
      object: z.literal("text_completion"),
      created: z.int(),
      model: z.string(),
      choices: z.array(z.object({ index: z.int(), text: z.string(), logprobs: CompletionLogprobs, finish_reason: z.enum(["stop", "length"]) })),
      usage: Usage,
    })
    .openapi("CompletionResponse");

  const Model = z
    .object({ id: z.string(), object: z.literal("model"), created: z.int(), owned_by: z.string(), max_model_len: z.int().openapi({ description: "Longest prompt + completion in tokens." }) })
    .openapi("Model");
  const ModelList = z.object({ object: z.literal("list"), data: z.array(Model) }).openapi("ModelList");

  return { ChatCompletionRequest, CompletionRequest, ChatCompletionResponse, CompletionResponse, Model, ModelList };
}

export type OpenAiSchemas = ReturnType<typeof createOpenAiSchemas>;
export type ChatCompletionBody = z.infer<OpenAiSchemas["ChatCompletionRequest"]>;
export type CompletionBody = z.infer<OpenAiSchemas["CompletionRequest"]>;
