/**
 * The generated-token memory (generatedTokenMemory.ts) in a chat's path: a finished turn's ids go
 * in by their exact text; a rendered chat prompt that starts with a remembered text, cut where the
 * tokenizer provably tokenizes the two sides apart as it does the whole, comes out as the
 * remembered ids followed by the rest's tokenization.
 */
import type { ModelTokenizer } from "../model/modelTokenizer.ts";
import type { GeneratedTokenMemory } from "./generatedTokenMemory.ts";
import type { GenerationRequest } from "./generationTypes.ts";

/** A rendered chat's prompt ids: a prefix's ids remembered under the request's cache salt, then the rest's; or the whole text's. */
export async function rememberedChatIds(
  memory: GeneratedTokenMemory,
  tokenizer: Pick<ModelTokenizer, "splitsAt">,
  text: string,
  encode: (text: string) => Promise<number[]>,
  cacheSalt?: string,
): Promise<number[]> {
  const prefix = memory.size === 0 ? null : memory.longestPrefix(text, (at) => tokenizer.splitsAt(text, at), cacheSalt);
  if (prefix === null) return encode(text);
  const rest = await encode(text.slice(prefix.length));
  const ids = new Array<number>(prefix.ids.length + rest.length);
  for (let i = 0; i < prefix.ids.length; i++) ids[i] = prefix.ids[i]!;
  for (let i = 0; i < rest.length; i++) ids[prefix.ids.length + i] = rest[i]!;
  return ids;
}

/**
 * Remembers a finished chat turn: its prompt and answer ids, less the stop token that ended it
 * (the next turn's template writes that token's text itself), by the text they decode to exactly.
 * Ids without an exact text (a partial character, an unknown id) are not remembered.
 */
export function rememberAnswer(memory: GeneratedTokenMemory, tokenizer: Pick<ModelTokenizer, "exactText">, request: GenerationRequest, tokens: readonly number[]): void {
  if (request.rememberAnswer !== true) return;
  let end = tokens.length;
  if (end > request.promptIds.length && request.stopTokenIds?.includes(tokens[end - 1]!) === true) end--;
  const ids = tokens.slice(0, end);
  const text = tokenizer.exactText(ids);
  if (text !== null) memory.remember(ids, text, request.cacheSalt);
}
