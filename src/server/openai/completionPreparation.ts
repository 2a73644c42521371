/**
 * A completions request made ready to generate: the model checked, refused fields and best_of
 * answered, the prompts prepared by the engine in one trip (texts, token ids, or `segments` whose
 * chunks' KV is reused), what echo repeats, the output constrained and `best_of` candidates of
 * each prompt submitted. A problem is an InvalidRequest naming the field.
 */
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import type { GenerationHandle } from "../../engine/generationHandle.ts";
import type { PromptRequest } from "../../engine/promptPreparation.ts";
import type { CompletionBody } from "../openaiSchemas.ts";
import { generationOptions, truncatePrompt } from "./generationOptions.ts";
import { InvalidRequest } from "./invalidRequest.ts";
import { constraintsFor } from "./outputConstraints.ts";
import { preparedPrompt } from "./preparedPrompt.ts";
import { checkServedModel, choicesPerPrompt, MAX_CHOICES_PER_PROMPT, refuseUnsupported } from "./requestChecks.ts";
import { submitAll } from "./submitChoices.ts";

/** Default max_tokens of /v1/completions (OpenAI's). */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

export interface PreparedCompletion {
  /** `bestOf` per prompt, prompt by prompt, submitted. */
  handles: GenerationHandle[];
  /** Each prompt's ids, as given or tokenized (before truncate_prompt_tokens). */
  prompts: number[][];
  /** Choices returned per prompt. */
  n: number;
  /** Candidates generated per prompt (≥ n; the best n are returned). */
  bestOf: number;
  /** Top alternatives per token (null: no logprobs). */
  topLogprobs: number | null;
  /** With echo: each prompt's text as echoed (null: no echo). */
  echoTexts: string[] | null;
  /** By prompt: whether its echo is the text the client gave (else its ids decoded, special tokens included). */
  echoedAsGiven: boolean[];
}

export async function prepareCompletion(engine: GenerationEngine, body: CompletionBody): Promise<PreparedCompletion> {
  const n = choicesPerPrompt(body);
  const bestOf = body.best_of ?? n;
  const topLogprobs = body.logprobs ?? null;
  const echo = body.echo === true;
  checkServedModel(engine, body.model);
  refuseUnsupported(body, "completions");
  if (bestOf < n) throw new InvalidRequest("best_of", `must be at least n (${n}), got ${bestOf}`);
  if (bestOf > MAX_CHOICES_PER_PROMPT) throw new InvalidRequest("best_of", `at most ${MAX_CHOICES_PER_PROMPT}, got ${bestOf}`);
  if (bestOf > n && body.stream) throw new InvalidRequest("best_of", "the best of several candidates is known only at the end: best_of larger than n cannot be streamed");
  if (echo && body.segments) throw new InvalidRequest("echo", "echo repeats a prompt; give prompt, not segments");
  const { promptIds: prompts, segments } = await preparedPrompt(engine, completionPrompt(body));
  prompts.forEach((ids, index) => {
    if (ids.length === 0) throw new InvalidRequest(prompts.length > 1 ? `prompt[${index}]` : "prompt", "the prompt is empty");
  });
  // Echoed as given: a text prompt's own text, token ids decoded.
  const given = body.prompt;
  const texts = typeof given === "string" ? [given] : Array.isArray(given) && typeof given[0] === "string" ? (given as string[]) : null;
  const echoedAsGiven = prompts.map(() => texts !== null);
  const echoTexts = echo ? prompts.map((ids, index) => texts?.[index] ?? engine.tokenizer.decode(ids)) : null;
  const constraints = await constraintsFor(engine, body, prompts.length * bestOf);
  const handles = submitAll(engine, prompts, bestOf, constraints, (ids) => ({
    ...generationOptions(body),
    ...(segments !== undefined ? { segments } : {}),
    promptIds: segments === undefined ? truncatePrompt(body, ids) : ids,
    maxTokens: body.max_tokens ?? COMPLETIONS_DEFAULT_MAX_TOKENS,
    // Ranking best_of candidates needs their logprobs.
    logprobs: bestOf > n ? (topLogprobs ?? 0) : topLogprobs,
    promptLogprobs: echo && topLogprobs !== null ? topLogprobs : null,
  }));
  return { handles, prompts, n, bestOf, topLogprobs, echoTexts, echoedAsGiven };
}

/** The request's prompt as the engine prepares it: `segments`, a text, texts, token ids, or lists of them. */
function completionPrompt(body: CompletionBody): PromptRequest {
  const prompt = body.prompt;
  if (body.segments && prompt !== undefined) throw new InvalidRequest("segments", "give either prompt or segments, not both");
  if (body.segments) return { kind: "segments", texts: body.segments };
  if (prompt === undefined) throw new InvalidRequest("prompt", "required (or give segments)");
  if (typeof prompt === "string") return { kind: "completion", prompts: [prompt] };
  if (prompt.length > 0 && typeof prompt[0] === "number") return { kind: "completion", prompts: [prompt as number[]] };
  return { kind: "completion", prompts: prompt as string[] | number[][] };
}
