/**
 * The text_completion events of streamed choices: the echoed prompt first (with logprobs, once
 * its logprobs arrive from the prompt's first choice), text deltas (with logprobs), a finish chunk
 * per choice, then (stream_options.include_usage) the usage chunk and [DONE].
 */
import type { GeneratedToken, GenerationEvent } from "../../engine/generationTypes.ts";
import type { ModelTokenizer } from "../../model/modelTokenizer.ts";
import type { AnswerHeader } from "./answerHeader.ts";
import { pumpAll, type GenerationFinish } from "./choiceEvents.ts";
import type { PreparedCompletion } from "./completionPreparation.ts";
import { echoTokens, type CompletionTextOffsets } from "./completionText.ts";
import { completionLogprobs } from "./logprobs.ts";
import { usageOf } from "./usage.ts";

/** The events of `completion`'s choices, written through `send`; a failure goes to `fail`, then [DONE]. */
export async function streamCompletion(
  header: AnswerHeader,
  completion: PreparedCompletion,
  tokenizer: ModelTokenizer,
  textOffsets: CompletionTextOffsets,
  includeUsage: boolean,
  send: (data: unknown) => void,
  fail: (error: unknown) => void,
): Promise<void> {
  const { handles, prompts, n, topLogprobs, echoTexts } = completion;
  const chunk = (choices: unknown[]) => ({ id: header.id, object: "text_completion", created: header.created, model: header.model, choices, ...(includeUsage ? { usage: null } : {}) });
  const offsets = handles.map((_, index) => textOffsets.generated(Math.floor(index / n)));
  // By choice index: usage takes each prompt's first choice.
  const finished: GenerationFinish[] = new Array(handles.length);
  const echoed = handles.map(() => echoTexts === null);
  const siblingPromptLogprobs: (GeneratedToken[] | undefined)[] = prompts.map(() => undefined);
  // The prompt goes first; with logprobs, when its logprobs arrive with the first event.
  const sendEcho = (index: number, promptLogprobs: readonly GeneratedToken[] | undefined) => {
    echoed[index] = true;
    const prompt = Math.floor(index / n);
    const logprobs = topLogprobs === null ? null : completionLogprobs(tokenizer, echoTokens(prompts[prompt]!, promptLogprobs), textOffsets.echo(prompt));
    send(chunk([{ index, text: echoTexts![prompt], logprobs, finish_reason: null }]));
  };
  if (echoTexts !== null && topLogprobs === null) handles.forEach((_, index) => sendEcho(index, []));
  try {
    const forward = (index: number, event: GenerationEvent) => {
      if (event.type === "delta") {
        if (event.text === "" && topLogprobs === null) return;
        const logprobs = topLogprobs === null ? null : completionLogprobs(tokenizer, event.tokens, offsets[index]!);
        send(chunk([{ index, text: event.text, logprobs, finish_reason: null }]));
      } else {
        finished[index] = event;
        send(chunk([{ index, text: "", logprobs: null, finish_reason: event.reason }]));
      }
    };
    // A sibling's events wait until its prompt's logprobs (from the first sibling) are known.
    const held = new Map<number, GenerationEvent[]>();
    await pumpAll(handles, (index, event) => {
      const prompt = Math.floor(index / n);
      if (event.promptLogprobs !== undefined) siblingPromptLogprobs[prompt] = event.promptLogprobs;
      if (!echoed[index]) {
        if (siblingPromptLogprobs[prompt] === undefined) {
          held.set(index, [...(held.get(index) ?? []), event]);
          return;
        }
        sendEcho(index, siblingPromptLogprobs[prompt]);
      }
      forward(index, event);
      if (event.promptLogprobs === undefined) return;
      for (let sibling = prompt * n; sibling < (prompt + 1) * n; sibling++) {
        const waiting = held.get(sibling);
        if (waiting === undefined) continue;
        held.delete(sibling);
        sendEcho(sibling, event.promptLogprobs);
        for (const later of waiting) forward(sibling, later);
      }
    });
    if (includeUsage) send({ ...chunk([]), usage: usageOf(finished, n) });
  } catch (error) {
    fail(error);
  }
  send("[DONE]");
}
