/**
 * Every request field of OpenAI's chat and completions APIs, and the vLLM extras clients send,
 * with what this server does with it: honoured, accepted as information with no effect on the
 * answer, or refused (a 400 naming the field and why). Nothing is silently ignored: a field in
 * neither list is refused as unknown (OpenAI does the same). The README's field table and the
 * test that sends every field are checked against this list.
 */

export type FieldStatus = "honoured" | "informational" | "refused";
export type Endpoint = "chat" | "completions";

export interface RequestField {
  name: string;
  on: readonly Endpoint[];
  status: FieldStatus;
  /** What the test adds to a request to send this field: served when honoured or informational, a 400 when refused. */
  sample: Record<string, unknown>;
  /** For a field refused only for some values: why this value is refused (null: it is served). */
  refuse?: (value: unknown) => string | null;
  /** Why a field is refused outright. */
  why?: string;
}

const BOTH: readonly Endpoint[] = ["chat", "completions"];
const CHAT: readonly Endpoint[] = ["chat"];
const COMPLETIONS: readonly Endpoint[] = ["completions"];

/** The sample request part: the field with this value, or (`with`) more fields it needs. */
const part = (name: string, value: unknown, more: Record<string, unknown> = {}): Record<string, unknown> => ({ ...more, [name]: value });
const honoured = (name: string, on: readonly Endpoint[], value: unknown, refuse?: RequestField["refuse"], more?: Record<string, unknown>): RequestField => ({
  name,
  on,
  status: "honoured",
  sample: part(name, value, more),
  ...(refuse ? { refuse } : {}),
});
const informational = (name: string, on: readonly Endpoint[], value: unknown, refuse?: RequestField["refuse"]): RequestField => ({ name, on, status: "informational", sample: part(name, value), ...(refuse ? { refuse } : {}) });
const refused = (name: string, on: readonly Endpoint[], value: unknown, why: string): RequestField => ({ name, on, status: "refused", sample: part(name, value), why });
/** A field served with its default value and refused with any other. */
const onlyDefault = (name: string, on: readonly Endpoint[], fallback: unknown, value: unknown, why: string): RequestField => ({
  name,
  on,
  status: "refused",
  sample: part(name, value),
  refuse: (value) => (value === undefined || value === null || value === fallback ? null : why),
});

export const REQUEST_FIELDS: readonly RequestField[] = [
  honoured("messages", CHAT, [{ role: "user", content: "Hi" }]),
  honoured("prompt", COMPLETIONS, "Hi"),
  honoured("model", BOTH, ""),
  honoured("stream", BOTH, false),
  honoured("stream_options", BOTH, { include_usage: true }),
  honoured("max_tokens", BOTH, 2),
  honoured("max_completion_tokens", CHAT, 2),
  honoured("temperature", BOTH, 0.5),
  honoured("top_p", BOTH, 0.9),
  honoured("top_k", BOTH, 20),
  honoured("min_p", BOTH, 0.05),
  honoured("seed", BOTH, 7),
  honoured("stop", BOTH, ["\n\n"]),
  honoured("n", BOTH, 2),
  honoured("best_of", COMPLETIONS, 2),
  honoured("presence_penalty", BOTH, 0.5),
  honoured("frequency_penalty", BOTH, 0.5),
  honoured("repetition_penalty", BOTH, 1.1),
  honoured("logit_bias", BOTH, { "65": 1 }),
  honoured("logprobs", CHAT, true),
  honoured("logprobs", COMPLETIONS, 2),
  honoured("top_logprobs", CHAT, 2, undefined, { logprobs: true }),
  honoured("echo", COMPLETIONS, true),
  honoured("stop_token_ids", BOTH, [65]),
  honoured("include_stop_str_in_output", BOTH, true),
  honoured("ignore_eos", BOTH, true),
  honoured("min_tokens", BOTH, 1),
  honoured("skip_special_tokens", BOTH, false),
  honoured("truncate_prompt_tokens", BOTH, 8),
  honoured("allowed_token_ids", BOTH, [65, 66, 67]),
  honoured("cache_salt", BOTH, "tenant-a"),
  honoured("response_format", BOTH, { type: "text" }),
  honoured("guided_json", BOTH, { type: "object", properties: { a: { type: "integer" } }, required: ["a"] }),
  honoured("guided_regex", BOTH, "[ab]{2}"),
  honoured("guided_choice", BOTH, ["yes", "no"]),
  honoured("guided_grammar", BOTH, 'root ::= "a" | "b"'),
  honoured("structured_outputs", BOTH, { choice: ["x", "y"] }),
  honoured("guided_decoding_backend", BOTH, "xgrammar", (value) => (value === undefined || value === null || value === "xgrammar" || value === "auto" ? null : 'the grammar engine is xgrammar ("xgrammar" or "auto")')),
  // Served by a model whose template renders tools (test/server/toolCalls.test.ts); here, a 400 saying the template does not.
  honoured("tools", CHAT, [{ type: "function", function: { name: "f" } }]),
  honoured("tool_choice", CHAT, "none"),
  honoured("parallel_tool_calls", CHAT, false),
  honoured("chat_template_kwargs", CHAT, { enable_thinking: false }),
  honoured("add_generation_prompt", CHAT, true),
  honoured("documents", CHAT, [{ text: "A document." }]),
  honoured("segments", COMPLETIONS, ["A document.", "A question?"], undefined, { prompt: undefined }),
  honoured("ctxr", BOTH, { policy: "full" }),
  honoured("request_id", BOTH, "my-request-1"),
  informational("user", BOTH, "user-1"),
  informational("metadata", CHAT, { team: "a" }),
  informational("safety_identifier", CHAT, "hash-1"),
  informational("prompt_cache_key", CHAT, "key-1"),
  informational("service_tier", CHAT, "auto", (value) => (value === undefined || value === null || value === "auto" || value === "default" ? null : 'this server has one service tier ("auto" or "default")')),
  informational("store", CHAT, false, (value) => (value === true ? "this server does not store completions" : null)),
  refused("audio", CHAT, { voice: "alloy", format: "wav" }, "audio output is not supported (text only)"),
  onlyDefault("modalities", CHAT, undefined, ["text", "audio"], 'only text output is supported (["text"])'),
  refused("prediction", CHAT, { type: "content", content: "x" }, "predicted outputs are not supported"),
  refused("web_search_options", CHAT, {}, "web search is not supported"),
  refused("functions", CHAT, [{ name: "f" }], "deprecated by OpenAI; use tools"),
  refused("function_call", CHAT, "auto", "deprecated by OpenAI; use tool_choice"),
  honoured("reasoning_effort", CHAT, "low"),
  refused("verbosity", CHAT, "low", "the served model has no verbosity setting"),
  refused("suffix", COMPLETIONS, "tail", "fill-in-the-middle needs a model with a FIM template (prefix, suffix and middle tokens); this model has none"),
  refused("prompt_logprobs", BOTH, 1, "prompt logprobs come with completions' echo and logprobs"),
  refused("bad_words", BOTH, ["x"], "bad words are not supported; ban tokens with logit_bias -100"),
  refused("logits_processors", BOTH, ["x"], "custom logits processors are not supported"),
  onlyDefault("use_beam_search", BOTH, false, true, "beam search is not supported"),
  onlyDefault("length_penalty", BOTH, 1, 0.5, "a beam-search setting; beam search is not supported"),
  onlyDefault("spaces_between_special_tokens", BOTH, true, false, "special tokens are always joined as the tokenizer decodes them"),
  onlyDefault("continue_final_message", CHAT, false, true, "continuing the final message is not supported"),
  onlyDefault("add_special_tokens", CHAT, false, true, "the chat template writes the special tokens"),
  onlyDefault("echo", CHAT, false, true, "echo is supported by /v1/completions"),
  refused("chat_template", CHAT, "{{ messages }}", "the model's own chat template is used"),
  refused("guided_whitespace_pattern", BOTH, " ", "JSON whitespace is any, at most 16 characters between elements"),
  onlyDefault("priority", BOTH, 0, 1, "requests are served first come, first served"),
  onlyDefault("return_tokens_as_token_ids", BOTH, false, true, "not supported"),
  refused("kv_transfer_params", BOTH, {}, "disaggregated prefill is not supported"),
  refused("vllm_xargs", BOTH, {}, "not supported"),
];

/** The field's entry for an endpoint (undefined: unknown there). */
export function requestField(name: string, endpoint: Endpoint): RequestField | undefined {
  return REQUEST_FIELDS.find((field) => field.name === name && field.on.includes(endpoint));
}

/**
 * The first field of a body the server refuses, with why (null: none). Unknown fields are
 * reported by the schema, which is strict.
 */
export function refusedField(body: Record<string, unknown>, endpoint: Endpoint): { field: string; why: string } | null {
  return firstRefusedField(body, (name) => requestField(name, endpoint));
}

/** What decides whether a field is served: its status, and for some, its value. */
export interface FieldRule {
  status: FieldStatus;
  /** For a field refused only for some values: why this value is refused (null: it is served). */
  refuse?: (value: unknown) => string | null;
  /** Why a field is refused outright. */
  why?: string;
}

/** The first field of a body whose rule (`rule(name)`, undefined: none) refuses it, with why. */
export function firstRefusedField(body: Record<string, unknown>, rule: (name: string) => FieldRule | undefined): { field: string; why: string } | null {
  for (const [name, value] of Object.entries(body)) {
    if (value === undefined) continue;
    const field = rule(name);
    if (field === undefined) continue;
    if (field.refuse !== undefined) {
      const why = field.refuse(value);
      if (why !== null) return { field: name, why };
    } else if (field.status === "refused" && value !== null) {
      return { field: name, why: field.why ?? "not supported" };
    }
  }
  return null;
}
