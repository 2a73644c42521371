/** The text_completion object of finished candidates: the best n of each prompt, echo, logprobs, usage. */
import type { GenerationResult } from "../../engine/generationTypes.ts";
import type { ModelTokenizer } from "../../model/modelTokenizer.ts";
import type { AnswerHeader } from "./answerHeader.ts";
import { bestCandidates } from "./bestOf.ts";
import type { PreparedCompletion } from "./completionPreparation.ts";
import { echoTokens, type CompletionTextOffsets } from "./completionText.ts";
import { completionLogprobs, joinLogprobs } from "./logprobs.ts";
import { usageOf } from "./usage.ts";

export function completionAnswer(header: AnswerHeader, completion: PreparedCompletion, results: readonly GenerationResult[], tokenizer: ModelTokenizer, offsets: CompletionTextOffsets) {
  const { prompts, n, bestOf, topLogprobs, echoTexts } = completion;
  const choices = prompts.flatMap((promptIds, prompt) => {
    const candidates = results.slice(prompt * bestOf, (prompt + 1) * bestOf);
    const chosen = bestOf > n ? bestCandidates(candidates, n) : [...candidates.keys()];
    return chosen.map((candidate, k) => {
      const result = candidates[candidate]!;
      const echoed = echoTexts !== null && topLogprobs !== null ? completionLogprobs(tokenizer, echoTokens(promptIds, candidates[0]!.promptLogprobs), offsets.echo(prompt)) : null;
      const generated = topLogprobs === null ? null : completionLogprobs(tokenizer, result.tokens, offsets.generated(prompt));
      return {
        index: prompt * n + k,
        text: (echoTexts === null ? "" : echoTexts[prompt]!) + result.text,
        logprobs: generated === null ? null : echoed === null ? generated : joinLogprobs(echoed, generated),
        finish_reason: result.finishReason,
      };
    });
  });
  return { id: header.id, object: "text_completion", created: header.created, model: header.model, choices, usage: usageOf(results, bestOf) };
}
