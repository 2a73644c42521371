/**
 * Where each token begins in the text it is part of (the completions API's logprobs.text_offset):
 * the characters (code points, as OpenAI's and vLLM's Python count them) that the tokens before it
 * decode to, decoded as that text was (special tokens left out unless the text keeps them, the
 * prompt's last ids as context). A special token left out of the text adds nothing; the bytes of a
 * character split over several tokens all begin where that character does. Offsets stop at
 * `limit` (an echoed prompt given as text: its tokens cannot point past it).
 */
import { TokenTextStream, type StreamDecoder, type TokenTextStreamOptions } from "./textStream.ts";

export interface TokenTextOffsetsOptions extends TokenTextStreamOptions {
  /** The offset of the first token (the characters before the tokens, e.g. an echoed prompt). */
  start?: number;
  /** The largest offset. */
  limit?: number;
}

export class TokenTextOffsets {
  private readonly text: TokenTextStream;
  private readonly limit: number;
  private length: number;

  constructor(decoder: StreamDecoder, options: TokenTextOffsetsOptions = {}) {
    this.text = new TokenTextStream(decoder, options);
    this.length = options.start ?? 0;
    this.limit = options.limit ?? Number.POSITIVE_INFINITY;
  }

  /** The offsets of the next tokens, in order. */
  next(ids: readonly number[]): number[] {
    return ids.map((id) => {
      const offset = Math.min(this.length, this.limit);
      for (const _ of this.text.push(id)) this.length++;
      return offset;
    });
  }
}
