/**
 * Where a completion choice's text comes from, token by token: an echoed prompt (its first token
 * has no logprob) then the generated tokens, and the text_offset of each (characters, as code
 * points, of the choice's text).
 */
import type { GeneratedToken } from "../../engine/generationTypes.ts";
import { TokenTextOffsets } from "../../engine/tokenTextOffsets.ts";
import type { ModelTokenizer } from "../../model/modelTokenizer.ts";
import type { CompletionBody } from "../openaiSchemas.ts";
import type { PreparedCompletion } from "./completionPreparation.ts";
import { truncatePrompt } from "./generationOptions.ts";

/** Characters as text_offset counts them: code points (a character outside the BMP is one). */
export function characters(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** An echoed prompt's tokens: the first without a logprob, the rest with theirs (from the prompt's first sibling). */
export function echoTokens(promptIds: readonly number[], promptLogprobs: readonly GeneratedToken[] | undefined): GeneratedToken[] {
  return [{ id: promptIds[0]! }, ...(promptLogprobs ?? [])];
}

/**
 * text_offset counts characters (code points) of the choice's text: the echoed prompt's tokens
 * within the echo (a prompt given as text has no special tokens in it), then the generated
 * tokens decoded as the engine decodes them (skip_special_tokens, the prompt's last ids as context).
 */
export class CompletionTextOffsets {
  constructor(
    private readonly tokenizer: ModelTokenizer,
    private readonly body: CompletionBody,
    private readonly completion: PreparedCompletion,
  ) {}

  /** Offsets of prompt `prompt`'s echo (only with echo). */
  echo(prompt: number): TokenTextOffsets {
    const { echoTexts, echoedAsGiven } = this.completion;
    return new TokenTextOffsets(this.tokenizer, { skipSpecialTokens: echoedAsGiven[prompt]!, limit: characters(echoTexts![prompt]!) });
  }

  /** Offsets of a generated text of prompt `prompt`, after its echo when there is one. */
  generated(prompt: number): TokenTextOffsets {
    const { echoTexts, prompts } = this.completion;
    return new TokenTextOffsets(this.tokenizer, {
      skipSpecialTokens: this.body.skip_special_tokens ?? true,
      contextIds: truncatePrompt(this.body, prompts[prompt]!),
      start: echoTexts === null ? 0 : characters(echoTexts[prompt]!),
    });
  }
}
