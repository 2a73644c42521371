/**
 * The `logprobs` of an answer: chat's (content[] with bytes and top_logprobs) and completions'
 * (tokens, token_logprobs, top_logprobs, text_offset), from the generated tokens.
 */
import type { GeneratedToken } from "../../engine/generationTypes.ts";
import type { TokenTextOffsets } from "../../engine/tokenTextOffsets.ts";
import type { ModelTokenizer } from "../../model/modelTokenizer.ts";

/** The lowest logprob reported (log 0 is -Infinity, which JSON cannot hold). */
const LOGPROB_FLOOR = -9999;

type TokenNames = Pick<ModelTokenizer, "tokenText" | "tokenBytes">;

function clampLogprob(value: number): number {
  return Math.max(value, LOGPROB_FLOOR);
}

export function chatLogprobs(tokenizer: TokenNames, tokens: readonly GeneratedToken[]) {
  return {
    content: tokens.map((token) => ({
      token: tokenizer.tokenText(token.id),
      logprob: clampLogprob(token.logprob ?? 0),
      bytes: tokenizer.tokenBytes(token.id),
      top_logprobs: (token.top ?? []).map((alt) => ({ token: tokenizer.tokenText(alt.id), logprob: clampLogprob(alt.logprob), bytes: tokenizer.tokenBytes(alt.id) })),
    })),
  };
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[];
  text_offset: number[];
}

/**
 * Completion logprobs; text_offset from `offsets` (where each token begins in the choice's text).
 * A token without a logprob (an echoed prompt's first) gets null, as OpenAI answers.
 */
export function completionLogprobs(tokenizer: TokenNames, tokens: readonly GeneratedToken[], offsets: TokenTextOffsets): CompletionLogprobs {
  return {
    tokens: tokens.map((token) => tokenizer.tokenText(token.id)),
    token_logprobs: tokens.map((token) => (token.logprob === undefined ? null : clampLogprob(token.logprob))),
    top_logprobs: tokens.map((token) => {
      if (token.logprob === undefined) return null;
      const top: Record<string, number> = {};
      for (const alt of token.top ?? []) top[tokenizer.tokenText(alt.id)] ??= clampLogprob(alt.logprob);
      top[tokenizer.tokenText(token.id)] ??= clampLogprob(token.logprob ?? 0);
      return top;
    }),
    text_offset: offsets.next(tokens.map((token) => token.id)),
  };
}

/** An echoed prompt's logprobs, then the generated tokens'. */
export function joinLogprobs(first: CompletionLogprobs, second: CompletionLogprobs): CompletionLogprobs {
  return {
    tokens: [...first.tokens, ...second.tokens],
    token_logprobs: [...first.token_logprobs, ...second.token_logprobs],
    top_logprobs: [...first.top_logprobs, ...second.top_logprobs],
    text_offset: [...first.text_offset, ...second.text_offset],
  };
}
