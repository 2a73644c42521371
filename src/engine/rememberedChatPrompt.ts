/**
 * The generated-token memory (generatedTokenMemory.ts) in a chat's path: a finished turn's ids go
 * in by their exact text (decoded off the request thread when long); a rendered chat prompt that
 * starts with a remembered text, cut where the tokenizer provably tokenizes the two sides apart as
 * it does the whole, comes out as the remembered ids followed by the rest's tokenization. A prompt
 * waits for the turns being remembered, so a client that sends its next turn at once finds its last.
 */
import type { ModelTokenizer } from "../model/modelTokenizer.ts";
import type { GeneratedTokenMemory } from "./generatedTokenMemory.ts";
import type { GenerationRequest } from "./generationTypes.ts";

export interface ChatTurnTokenizing {
  tokenizer: Pick<ModelTokenizer, "splitsAt">;
  encode(text: string): Promise<number[]>;
  exactText(ids: readonly number[]): Promise<string | null>;
}

export class RememberedChatTurns {
  /** The turns being remembered, in order, and how many. */
  private remembering: Promise<void> = Promise.resolve();
  private pending = 0;

  constructor(
    private readonly memory: GeneratedTokenMemory,
    private readonly tokenizing: ChatTurnTokenizing,
    private readonly log: (line: string) => void = () => {},
  ) {}

  /** Whether there is nothing remembered nor being remembered (a prompt is then tokenized as usual). */
  get empty(): boolean {
    return this.memory.size === 0 && this.pending === 0;
  }

  /**
   * Remembers a finished chat turn: its prompt and answer ids, less the stop token that ended it
   * (the next turn's template writes that token's text itself), by the text they decode to
   * exactly, under the request's cache salt. Ids without an exact text (a partial character, an
   * unknown id) are not remembered.
   */
  remember(request: GenerationRequest, tokens: readonly number[]): void {
    if (request.rememberAnswer !== true) return;
    let end = tokens.length;
    if (end > request.promptIds.length && request.stopTokenIds?.includes(tokens[end - 1]!) === true) end--;
    const ids = tokens.slice(0, end);
    this.pending++;
    this.remembering = this.remembering
      .then(async () => {
        const text = await this.tokenizing.exactText(ids);
        if (text !== null) this.memory.remember(ids, text, request.cacheSalt);
      })
      .catch((error: unknown) => this.log(`ctxr: a chat turn's ids are not remembered: ${(error as Error)?.message ?? error}`))
      .finally(() => this.pending--);
  }

  /** A rendered chat's prompt ids: a prefix's ids remembered under `cacheSalt`, then the rest's; or the whole text's. */
  async promptIds(text: string, cacheSalt?: string): Promise<number[]> {
    await this.remembering;
    const prefix = this.memory.size === 0 ? null : this.memory.longestPrefix(text, (at) => this.tokenizing.tokenizer.splitsAt(text, at), cacheSalt);
    if (prefix === null) return this.tokenizing.encode(text);
    const rest = await this.tokenizing.encode(text.slice(prefix.length));
    const ids = new Array<number>(prefix.ids.length + rest.length);
    for (let i = 0; i < prefix.ids.length; i++) ids[i] = prefix.ids[i]!;
    for (let i = 0; i < rest.length; i++) ids[prefix.ids.length + i] = rest[i]!;
    return ids;
  }
}
