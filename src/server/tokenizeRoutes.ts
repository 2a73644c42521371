/**
 * vLLM's tokenizer endpoints over the served model's tokenizer (`ctxr serve --model`):
 *
 * - POST /tokenize: `{prompt}` gives the ids a completion of that prompt starts from (BOS
 *   included unless add_special_tokens is false); `{messages}` gives the ids of the chat
 *   template's rendering, as a chat completion would (add_generation_prompt default true);
 *   answers `{count, max_model_len, tokens, token_strs}`;
 * - POST /detokenize: `{tokens}` to `{prompt}` (special tokens kept, as vLLM does).
 *
 * Without --model (and without --upstream) both answer 404 saying how to load a model; with
 * --upstream the engine's own pass through (proxyRoutes.ts).
 */
import { collectGarbage } from "../runtime/garbageCollector.ts";
import { jsonDepthLimit } from "../http/jsonDepthLimit.ts";
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context, MiddlewareHandler } from "hono";
import { requestChatMessages } from "../chat/chatMessages.ts";
import type { GenerationEngine } from "../engine/generationEngine.ts";
import { ChatTemplateError, ModelTokenizerError, type ChatTemplateOptions } from "../model/modelTokenizer.ts";
import { RequestError } from "../http/requestError.ts";
import { errorResponse } from "../http/errors.ts";
import { tokenizeAnswerStream } from "./tokenizeAnswer.ts";

/** A prompt past this many characters is tokenized with no other such prompt at once. */
const BIG_PROMPT_CHARS = 256 * 1024;

/**
 * The most characters /tokenize takes (a prompt, or the messages' JSON): the tokenizer's working
 * memory is ~150 times the text (a 7 MB prompt peaked at 1.2 GB), so past this a 400 (issue 27).
 */
export const MAX_TOKENIZE_CHARS = 1024 * 1024;

/** A gate that lets `limit` holders through at once (the others queue, first come first served). */
class Gate {
  private held = 0;
  private readonly queue: (() => void)[] = [];
  constructor(private readonly limit: number) {}

  async acquire(): Promise<() => void> {
    if (this.held >= this.limit) await new Promise<void>((resolve) => this.queue.push(resolve));
    else this.held++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.queue.shift();
      if (next !== undefined) next();
      else this.held--;
    };
  }
}

export const TOKENIZE_PATHS: ReadonlyMap<string, string[]> = new Map([
  ["/tokenize", ["POST"]],
  ["/detokenize", ["POST"]],
]);

export interface TokenizeRouteOptions {
  /** Run before validation (API key, body limit). */
  middleware: MiddlewareHandler[];
  secured: boolean;
  errorSchema: z.ZodType;
  maxJsonDepth: number;
}

const nullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

const TokenizeRequest = z
  .object({
    model: z.string().optional().openapi({ description: "The served model's id; optional." }),
    prompt: z.string().optional().openapi({ description: "A completion prompt (give it or messages)." }),
    messages: z
      .array(z.object({ role: z.string().min(1), content: z.unknown() }).passthrough())
      .min(1)
      .optional()
      .openapi({ description: "A conversation, rendered with the model's chat template (give it or prompt)." }),
    add_special_tokens: nullable(z.boolean()).openapi({ description: "Add BOS as completions do: default true with prompt; with messages, default false (the template writes its own)." }),
    add_generation_prompt: nullable(z.boolean()).openapi({ description: "With messages: open an assistant turn at the end (default true)." }),
    continue_final_message: nullable(z.boolean()).openapi({ description: "Not supported: true is refused." }),
    chat_template_kwargs: nullable(z.record(z.string(), z.unknown())).openapi({ description: "With messages: more variables for the chat template." }),
    tools: nullable(z.array(z.unknown())).openapi({ description: "With messages: the tools, rendered by the chat template's tools variable as /v1/chat/completions does." }),
    return_token_strs: nullable(z.boolean()).openapi({ description: "Also answer each token's vocabulary string." }),
  })
  .passthrough()
  .openapi("TokenizeRequest", { example: { prompt: "Hello, world", return_token_strs: true } });

const TokenizeResponse = z
  .object({
    count: z.int(),
    max_model_len: z.int().openapi({ description: "Longest prompt + completion in tokens." }),
    tokens: z.array(z.int()),
    token_strs: z.array(z.string()).nullable().openapi({ description: "Each token's vocabulary string with return_token_strs, else null." }),
  })
  .openapi("TokenizeResponse");

const DetokenizeRequest = z
  .object({ model: z.string().optional(), tokens: z.array(z.int().min(0)).openapi({ description: "Token ids of the model's vocabulary." }) })
  .passthrough()
  .openapi("DetokenizeRequest", { example: { tokens: [1, 15043, 29892, 3186] } });

const DetokenizeResponse = z.object({ prompt: z.string() }).openapi("DetokenizeResponse");

type TokenizeBody = z.infer<typeof TokenizeRequest>;

/** The ids /tokenize answers for a request (RequestError naming the field when it cannot); long texts are tokenized off the request thread. */
export async function tokenizeIds(engine: GenerationEngine, body: TokenizeBody): Promise<number[]> {
  if (body.prompt !== undefined && body.messages !== undefined) throw new RequestError("messages", "give either prompt or messages, not both");
  if (body.messages === undefined) {
    if (body.prompt === undefined) throw new RequestError("prompt", "required (or messages)");
    return body.add_special_tokens === false ? await engine.tokenizeText(body.prompt) : await engine.tokenizeCompletionPrompt(body.prompt);
  }
  if (body.continue_final_message) throw new RequestError("continue_final_message", "not supported (neither is it by /v1/chat/completions)");
  const messages = requestChatMessages(body.messages, (field, message) => new RequestError(field, message));
  const options: ChatTemplateOptions = {
    addGenerationPrompt: body.add_generation_prompt ?? true,
    ...(body.chat_template_kwargs ? { templateKwargs: body.chat_template_kwargs } : {}),
    ...(body.tools ? { tools: body.tools } : {}),
  };
  try {
    return await engine.tokenizeChatPrompt(messages, options, body.add_special_tokens === true);
  } catch (error) {
    if (error instanceof ChatTemplateError || error instanceof ModelTokenizerError) throw new RequestError("messages", error.message);
    throw error;
  }
}

export function mountTokenizeRoutes(app: OpenAPIHono, engine: GenerationEngine, options: TokenizeRouteOptions): void {
  const security: Record<string, string[]>[] | undefined = options.secured ? [{ bearerAuth: [] }, { apiKeyHeader: [] }] : undefined;
  const error = (description: string) => ({ description, content: { "application/json": { schema: options.errorSchema } } });
  const errors = {
    400: error('Invalid input ("field" names it): a wrong type, both or neither of prompt and messages, a token id outside the vocabulary.'),
    ...(options.secured ? { 401: error("Missing or wrong API key.") } : {}),
    404: error("The request names another model than the one served."),
    413: error("The request body is larger than the server's --max-body-bytes."),
  };
  const post = (path: string, summary: string, request: z.ZodType, response: z.ZodType, description: string) =>
    createRoute({
      method: "post",
      path,
      tags: ["generation"],
      summary,
      middleware: [...options.middleware, jsonDepthLimit(options.maxJsonDepth)],
      security,
      request: { body: { required: true, content: { "application/json": { schema: request } } } },
      responses: { 200: { description, content: { "application/json": { schema: response } } }, ...errors },
    });
  const tokenizeRoute = post("/tokenize", "The token ids of a prompt or a chat, as generation sees them (vLLM's)", TokenizeRequest, TokenizeResponse, "The ids and their count.");
  const detokenizeRoute = post("/detokenize", "The text of token ids (vLLM's)", DetokenizeRequest, DetokenizeResponse, "The text.");

  // The vocabulary's strings, built on the first return_token_strs.
  let vocabulary: string[] | null = null;
  const bigTokenizations = new Gate(1);
  const otherModel = (c: Context, model: string | undefined): Response | null =>
    model === undefined || model === "" || model === engine.modelId ? null : errorResponse(c, 404, `model: model ${JSON.stringify(model)} does not exist; this server serves ${JSON.stringify(engine.modelId)}`, "model");

  app.openapi(tokenizeRoute, (async (c: Context) => {
    const body = (c.req as unknown as { valid(target: "json"): TokenizeBody }).valid("json");
    const refused = otherModel(c, body.model);
    if (refused !== null) return refused;
    const chars = (body.prompt?.length ?? 0) + (body.messages !== undefined ? JSON.stringify(body.messages).length : 0);
    if (chars > MAX_TOKENIZE_CHARS) {
      const field = body.prompt !== undefined ? "prompt" : "messages";
      return errorResponse(c, 400, `${field}: /tokenize takes at most ${MAX_TOKENIZE_CHARS} characters of text, got ${chars}`, field);
    }
    // Big prompts are tokenized one at a time (the tokenizer's working memory is many times the prompt's).
    const big = chars > BIG_PROMPT_CHARS;
    const release = big ? await bigTokenizations.acquire() : () => {};
    let tokens: number[];
    try {
      tokens = await tokenizeIds(engine, body);
    } finally {
      release();
    }
    if (body.return_token_strs) vocabulary ??= engine.tokenizer.encodedVocab();
    const vocab = vocabulary;
    // A big answer leaves tens of megabytes of slices behind, and the collector lets them pile up
    // across requests: collected when it is written (as the tokenizer thread collects its own).
    const ended = big ? () => setImmediate(collectGarbage) : undefined;
    const stream = tokenizeAnswerStream({ count: tokens.length, maxModelLen: engine.maxModelLen, tokens, tokenString: body.return_token_strs ? (id) => vocab![id] ?? "" : null }, ended);
    return new Response(stream, { status: 200, headers: { "content-type": "application/json" } });
  }) as never);

  app.openapi(detokenizeRoute, ((c: Context) => {
    const body = (c.req as unknown as { valid(target: "json"): z.infer<typeof DetokenizeRequest> }).valid("json");
    const refused = otherModel(c, body.model);
    if (refused !== null) return refused;
    const vocabSize = engine.tokenizer.vocabSize;
    const outside = body.tokens.findIndex((id) => id >= vocabSize);
    if (outside >= 0) return errorResponse(c, 400, `tokens[${outside}]: token id ${body.tokens[outside]} is outside the vocabulary (0 to ${vocabSize - 1})`, `tokens[${outside}]`);
    return c.json({ prompt: engine.tokenizer.decode(body.tokens) }, 200);
  }) as never);
}

/** Without --model (and without --upstream): the tokenizer paths say how to get a model. */
export function mountNoModelTokenizeRoutes(app: OpenAPIHono): void {
  const answer = (c: Context) => errorResponse(c, 404, `${c.req.path}: no model is loaded; start ctxr serve with --model DIR (or --upstream URL to proxy an engine's)`, "");
  for (const path of TOKENIZE_PATHS.keys()) app.post(path, answer);
}
