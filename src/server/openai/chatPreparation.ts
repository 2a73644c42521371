/**
 * A chat request made ready to generate: the model checked, refused fields answered, the tools
 * resolved against the model's template, the prompt prepared by the engine in one trip (rendered
 * to ids or, with `documents`, to segments whose chunks' KV is reused), the output constrained
 * (structured output, tool calls) and the choices submitted. /v1/chat/completions and
 * /v1/responses (which translates its request to a chat request) both start here; a problem is an
 * InvalidRequest naming the chat field.
 */
import { requestChatMessages } from "../../chat/chatMessages.ts";
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import type { GenerationHandle } from "../../engine/generationHandle.ts";
import { checkToolBudget } from "../../engine/grammar/grammarBudget.ts";
import type { PromptRequest } from "../../engine/promptPreparation.ts";
import { ToolRequestError, toolRequestOf, type ToolRequest } from "../../engine/toolCalls/toolRequest.ts";
import type { ChatCompletionBody } from "../openaiSchemas.ts";
import { generationOptions, truncatePrompt } from "./generationOptions.ts";
import { InvalidRequest } from "./invalidRequest.ts";
import { asInvalidRequest, constraintsFor, SPECIAL_MARKERS, toolConstraintsFor } from "./outputConstraints.ts";
import { preparedPrompt } from "./preparedPrompt.ts";
import { chatReasoningStart, thinkingDisabled } from "./chatReasoning.ts";
import { detectReasoningParser, type ReasoningStart } from "../../engine/reasoning/reasoningParser.ts";
import { checkPromptFits, checkServedModel, choicesPerPrompt, refuseUnsupported } from "./requestChecks.ts";
import { submitAll } from "./submitChoices.ts";

export interface PreparedChat {
  /** One per choice, submitted. */
  handles: GenerationHandle[];
  /** Top alternatives per token (null: no logprobs). */
  topLogprobs: number | null;
  /** The request's tools (null: none given). */
  tools: ToolRequest | null;
  /** Where each answer starts, reasoning or content (null: the server splits no reasoning out). */
  reasoning: ReasoningStart | null;
}

export async function prepareChatGeneration(engine: GenerationEngine, body: ChatCompletionBody): Promise<PreparedChat> {
  checkServedModel(engine, body.model);
  refuseUnsupported(body, "chat");
  const tools = requestedTools(engine, body);
  if (body.top_logprobs !== undefined && body.top_logprobs !== null && body.logprobs !== true) throw new InvalidRequest("top_logprobs", 'needs "logprobs": true');
  const topLogprobs = body.logprobs === true ? (body.top_logprobs ?? 0) : null;
  thinkingDisabled(body);
  checkReasoningEffort(engine, body);
  const { promptIds: [promptIds], segments } = await preparedPrompt(engine, chatPrompt(body, tools));
  const reasoning = chatReasoningStart(engine, body, promptIds!);
  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? null;
  // A long tool list both lengthens the prompt and costs the most to compile: the prompt is checked first.
  checkPromptFits(engine, segments === undefined ? truncatePrompt(body, promptIds!).length : promptIds!.length, maxTokens);
  const callsExpected = tools !== null && tools.choice !== null;
  const constraints = callsExpected ? await toolConstraintsFor(engine, body, tools, choicesPerPrompt(body)) : await constraintsFor(engine, body, choicesPerPrompt(body));
  // Harmony's channels and the markers of some tool-call formats are special tokens the parsers (or,
  // with --reasoning-parser none, the client reading harmony itself, as from llama.cpp) must see.
  const harmony = reasoning === "harmony" || detectReasoningParser(engine.tokenizer.chatTemplateSource) === "gpt-oss";
  const toolOptions = harmony || (callsExpected && SPECIAL_MARKERS.has(tools.format)) ? { skipSpecialTokens: false } : {};
  const handles = submitAll(engine, [promptIds!], choicesPerPrompt(body), constraints, (ids) => ({
    ...generationOptions(body),
    ...toolOptions,
    ...(segments !== undefined ? { segments } : {}),
    promptIds: segments === undefined ? truncatePrompt(body, ids) : ids,
    // A plain chat's turn: the next turn may resend its answer (a chat with documents is prompted by its segments).
    ...(segments === undefined ? { rememberAnswer: true } : {}),
    maxTokens,
    logprobs: topLogprobs,
    ...(reasoning !== null && reasoning !== "content" ? { reasoning: { start: reasoning, vocabulary: engine.reasoningVocabulary } } : {}),
  }));
  return { handles, topLogprobs, tools, reasoning };
}

/** The request's tools against the model's template (null: none), their budget checked before they are rendered into the prompt. */
function requestedTools(engine: GenerationEngine, body: ChatCompletionBody): ToolRequest | null {
  let tools: ToolRequest | null;
  try {
    tools = toolRequestOf(body, engine.tokenizer.chatTemplateSource, engine.toolCallFormat);
  } catch (error) {
    if (error instanceof ToolRequestError) throw new InvalidRequest(error.field, error.message);
    throw error;
  }
  if (tools !== null && tools.choice !== null) {
    try {
      checkToolBudget(tools.tools.map((tool) => tool.function), engine.grammarLimits);
    } catch (error) {
      throw asInvalidRequest(error);
    }
  }
  return tools;
}

/** reasoning_effort is a template variable: a model whose template does not read it cannot honour it. */
function checkReasoningEffort(engine: GenerationEngine, body: ChatCompletionBody): void {
  if (body.reasoning_effort == null) return;
  if (!(engine.tokenizer.chatTemplateSource ?? "").includes("reasoning_effort")) {
    throw new InvalidRequest("reasoning_effort", "this model's chat template has no reasoning_effort setting (gpt-oss's has); pass its own variables with chat_template_kwargs");
  }
}

/** The chat's prompt as the engine prepares it: messages, template options (reasoning_effort among the template's variables), documents. */
function chatPrompt(body: ChatCompletionBody, tools: ToolRequest | null): PromptRequest {
  const messages = requestChatMessages(body.messages, (field, message) => new InvalidRequest(field, message));
  const templateKwargs = { ...(body.reasoning_effort != null ? { reasoning_effort: body.reasoning_effort } : {}), ...body.chat_template_kwargs };
  const template = {
    ...(Object.keys(templateKwargs).length > 0 ? { templateKwargs } : {}),
    ...(body.add_generation_prompt != null ? { addGenerationPrompt: body.add_generation_prompt } : {}),
    ...(tools !== null ? { tools: tools.tools } : {}),
  };
  return {
    kind: "chat",
    messages,
    template,
    ...(body.documents && body.documents.length > 0 ? { documents: body.documents } : {}),
    ...(body.cache_salt != null ? { cacheSalt: body.cache_salt } : {}),
  };
}
