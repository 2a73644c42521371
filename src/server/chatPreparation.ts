/**
 * A chat request made ready to generate: the model checked, refused fields answered, the tools
 * resolved against the model's template, the messages rendered to prompt ids (or, with
 * `documents`, to segments whose chunks' KV is reused), the output constrained (structured
 * output, tool calls) and the choices submitted. /v1/chat/completions and /v1/responses (which
 * translates its request to a chat request) both start here; a problem is an InvalidRequest
 * naming the chat field.
 */
import { requestChatMessages } from "../engine/chatMessages.ts";
import type { GenerationEngine } from "../engine/generationEngine.ts";
import type { GenerationHandle } from "../engine/generationHandle.ts";
import { ToolRequestError, toolRequestOf, type ToolRequest } from "../engine/toolCalls/toolRequest.ts";
import { SegmentedPromptError, type SegmentedPrompt } from "../kv/segmentedPrompt.ts";
import { ChatTemplateError, ModelTokenizerError } from "../model/modelTokenizer.ts";
import { checkToolBudget } from "../engine/grammar/grammarBudget.ts";
import {
  asInvalidRequest,
  checkPromptFits,
  checkServedModel,
  choicesPerPrompt,
  constraintsFor,
  generationOptions,
  InvalidRequest,
  refuseUnsupported,
  SPECIAL_MARKERS,
  submitAll,
  toolConstraintsFor,
  truncatePrompt,
} from "./generationRequest.ts";
import type { ChatCompletionBody } from "./openaiSchemas.ts";

export interface PreparedChat {
  /** One per choice, submitted. */
  handles: GenerationHandle[];
  /** Top alternatives per token (null: no logprobs). */
  topLogprobs: number | null;
  /** The request's tools (null: none given). */
  tools: ToolRequest | null;
}

export async function prepareChatGeneration(engine: GenerationEngine, body: ChatCompletionBody): Promise<PreparedChat> {
  const { tokenizer } = engine;
  let tools: ToolRequest | null = null;
  checkServedModel(engine, body.model);
  refuseUnsupported(body, "chat");
  try {
    tools = toolRequestOf(body, tokenizer.chatTemplateSource, engine.toolCallFormat);
  } catch (error) {
    if (error instanceof ToolRequestError) throw new InvalidRequest(error.field, error.message);
    throw error;
  }
  // The tool budget (count, schema sizes) before the tools are rendered into the prompt.
  if (tools !== null && tools.choice !== null) {
    try {
      checkToolBudget(tools.tools.map((tool) => tool.function), engine.grammarLimits);
    } catch (error) {
      throw asInvalidRequest(error);
    }
  }
  if (body.top_logprobs !== undefined && body.top_logprobs !== null && body.logprobs !== true) throw new InvalidRequest("top_logprobs", 'needs "logprobs": true');
  const topLogprobs = body.logprobs === true ? (body.top_logprobs ?? 0) : null;
  const messages = requestChatMessages(body.messages, (field, message) => new InvalidRequest(field, message));
  let promptIds: number[];
  let segments: SegmentedPrompt | undefined;
  try {
    const templateOptions = {
      ...(body.chat_template_kwargs ? { templateKwargs: body.chat_template_kwargs } : {}),
      ...(body.add_generation_prompt != null ? { addGenerationPrompt: body.add_generation_prompt } : {}),
      ...(tools !== null ? { tools: tools.tools } : {}),
    };
    if (body.documents && body.documents.length > 0) {
      segments = await engine.tokenizeChatSegments(messages, body.documents, templateOptions);
      promptIds = engine.segmentIds(segments);
    } else {
      promptIds = await engine.tokenizeChatPrompt(messages, templateOptions);
    }
  } catch (error) {
    if (error instanceof ChatTemplateError || error instanceof ModelTokenizerError) throw new InvalidRequest("messages", error.message);
    if (error instanceof SegmentedPromptError) throw new InvalidRequest(error.field, error.message);
    throw error;
  }
  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? null;
  // A long tool list both lengthens the prompt and costs the most to compile: the prompt is checked first.
  checkPromptFits(engine, segments === undefined ? truncatePrompt(body, promptIds).length : promptIds.length, maxTokens);
  const constraints = tools !== null && tools.choice !== null ? await toolConstraintsFor(engine, body, tools, choicesPerPrompt(body)) : await constraintsFor(engine, body, choicesPerPrompt(body));
  const toolOptions = tools !== null && tools.choice !== null && SPECIAL_MARKERS.has(tools.format) ? { skipSpecialTokens: false } : {};
  const handles = submitAll(engine, [promptIds], choicesPerPrompt(body), constraints, (ids) => ({
    ...generationOptions(body),
    ...toolOptions,
    ...(segments !== undefined ? { segments } : {}),
    promptIds: segments === undefined ? truncatePrompt(body, ids) : ids,
    maxTokens,
    logprobs: topLogprobs,
  }));
  return { handles, topLogprobs, tools };
}
