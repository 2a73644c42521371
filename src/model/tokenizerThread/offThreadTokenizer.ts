/**
 * Prompt ids as promises: a long text is tokenized on the tokenizer thread (tokenizerThread.ts),
 * a short one inline, where the thread's round trip would cost more than the stall it saves. If
 * the thread fails (not the text), the text is tokenized inline: the answer never depends on
 * where it was computed.
 */
import type { ChatTemplateMessage, ChatTemplateOptions, ModelTokenizer } from "../modelTokenizer.ts";
import { TokenizerThreadError, type TokenizerThread } from "./tokenizerThread.ts";

/**
 * Texts up to this many characters are tokenized inline: about 2 ms of the request thread
 * (tokenizers run at 0.2 to 0.5 µs a character), against a round trip of about 0.1 ms plus the
 * wait behind whatever the thread is tokenizing.
 */
export const INLINE_TOKENIZE_CHARS = 4096;

/** Ids up to this many are decoded inline (decoding runs at about 1 µs an id). */
export const INLINE_DECODE_IDS = 2048;

/** The characters a chat's template will tokenize, near enough to choose inline or not. */
export function chatChars(messages: readonly ChatTemplateMessage[], options: ChatTemplateOptions): number {
  let chars = options.tools !== undefined && options.tools.length > 0 ? JSON.stringify(options.tools).length : 0;
  for (const message of messages) {
    chars += message.content.length;
    if (message.tool_calls !== undefined) chars += JSON.stringify(message.tool_calls).length;
  }
  return chars;
}

/** The ids as a plain array: a preallocated array filled in a loop (a million ids in ~2 ms; Array.from takes 20-110 ms). */
function plainArray(ids: Int32Array): number[] {
  const out = new Array<number>(ids.length);
  for (let i = 0; i < ids.length; i++) out[i] = ids[i]!;
  return out;
}

function withBos(ids: number[], bos: number | null): number[] {
  if (bos !== null && ids[0] !== bos) ids.unshift(bos);
  return ids;
}

export class OffThreadTokenizer {
  constructor(
    private readonly tokenizer: ModelTokenizer,
    private readonly thread: TokenizerThread | null,
    private readonly inlineChars = INLINE_TOKENIZE_CHARS,
  ) {}

  /** A text's ids, `bos` first when given and the text did not encode it. */
  async encode(text: string, bos: number | null = null): Promise<number[]> {
    if (this.thread === null || text.length <= this.inlineChars) return withBos(this.tokenizer.encode(text), bos);
    return this.offThread(() => this.thread!.encode(text, bos), () => withBos(this.tokenizer.encode(text), bos));
  }

  /** A chat's ids through the chat template (ChatTemplateError / ModelTokenizerError as applyChatTemplate raises them). */
  async encodeChat(messages: readonly ChatTemplateMessage[], options: ChatTemplateOptions = {}, bos: number | null = null): Promise<number[]> {
    const inline = () => withBos(this.tokenizer.encode(this.tokenizer.applyChatTemplate(messages, options)), bos);
    if (this.thread === null || chatChars(messages, options) <= this.inlineChars) return inline();
    return this.offThread(() => this.thread!.encodeChat(messages, options, bos), inline);
  }

  /** A chat rendered by the chat template, a long one on the tokenizer thread (errors as applyChatTemplate raises them). */
  async renderChat(messages: readonly ChatTemplateMessage[], options: ChatTemplateOptions = {}): Promise<string> {
    const inline = () => this.tokenizer.applyChatTemplate(messages, options);
    if (this.thread === null || chatChars(messages, options) <= this.inlineChars) return inline();
    try {
      return await this.thread.renderChat(messages, options);
    } catch (error) {
      if (error instanceof TokenizerThreadError) return inline();
      throw error;
    }
  }

  /** ModelTokenizer.exactText without holding up the request thread for many ids. */
  async exactText(ids: readonly number[]): Promise<string | null> {
    if (this.thread === null || ids.length <= INLINE_DECODE_IDS) return this.tokenizer.exactText(ids);
    try {
      return await this.thread.exactText(ids);
    } catch (error) {
      if (error instanceof TokenizerThreadError) return this.tokenizer.exactText(ids);
      throw error;
    }
  }

  private async offThread(request: () => Promise<Int32Array>, inline: () => number[]): Promise<number[]> {
    let ids: Int32Array;
    try {
      ids = await request();
    } catch (error) {
      if (error instanceof TokenizerThreadError) return inline();
      throw error;
    }
    return plainArray(ids);
  }
}
