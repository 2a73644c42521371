/**
 * Incremental detokenization: generated ids in, newly completed text out.
 *
 * A byte-level token may hold part of a multi-byte UTF-8 character, and decoding
 * it alone gives U+FFFD; some decoders (Metaspace's leading space, clean-up of
 * spaces) also read a token differently depending on what precedes it. So each
 * push decodes a short window of ids, from the start of the previous emitted piece
 * to the end, and emits what the window's text adds to the text of the ids already
 * emitted, as vLLM and Hugging Face's TextStreamer do. While the window's text ends
 * in U+FFFD (a character still incomplete) nothing is emitted; the text is released
 * once a later token completes it, or by flush(). The pieces joined are the decode
 * of all ids (for byte-level tokenizers exactly; the window keeps it so for the
 * others), and no piece splits a character.
 */

/** What the stream needs of a tokenizer (ModelTokenizer has it). */
export interface StreamDecoder {
  decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string;
}

export interface TokenTextStreamOptions {
  /** Leave special tokens out of the text, default false. */
  skipSpecialTokens?: boolean;
  /**
   * Ids before the first generated one (the prompt's last few), read as context
   * only: decoders that drop a leading space at the start of a text then keep the
   * space of the first generated word. Only the last CONTEXT_TOKENS are kept.
   */
  contextIds?: readonly number[];
}

/** Context ids kept from options.contextIds. */
export const CONTEXT_TOKENS = 6;

const REPLACEMENT_CHARACTER = "\uFFFD";

export class TokenTextStream {
  private readonly decoder: StreamDecoder;
  private readonly options: { skipSpecialTokens: boolean };
  /** The window: ids from the start of the previous emitted piece (or the context) on. */
  private ids: number[];
  /** ids[0 .. readStart) are emitted (or context); the rest are pending. */
  private readStart: number;
  /** decode(ids[0 .. readStart)). */
  private prefixText: string;

  constructor(decoder: StreamDecoder, options: TokenTextStreamOptions = {}) {
    this.decoder = decoder;
    this.options = { skipSpecialTokens: options.skipSpecialTokens ?? false };
    this.ids = options.contextIds ? options.contextIds.slice(-CONTEXT_TOKENS) : [];
    this.readStart = this.ids.length;
    this.prefixText = this.decode(this.ids);
  }

  /** Adds a generated id; returns the text it completes ("" while a character is incomplete). */
  push(id: number): string {
    this.ids.push(id);
    return this.advance(false);
  }

  /** Adds several ids; returns the text they complete. */
  pushAll(ids: readonly number[]): string {
    let text = "";
    for (const id of ids) text += this.push(id);
    return text;
  }

  /** The text still held back (an incomplete character reads as U+FFFD); the stream stays usable. */
  flush(): string {
    return this.advance(true);
  }

  /** Whether ids are pending (pushed, their text not yet emitted). */
  get pending(): boolean {
    return this.ids.length > this.readStart;
  }

  private decode(ids: readonly number[]): string {
    return ids.length === 0 ? "" : this.decoder.decode(ids, { skipSpecialTokens: this.options.skipSpecialTokens });
  }

  private advance(final: boolean): string {
    if (this.ids.length === this.readStart) return "";
    const text = this.decode(this.ids);
    if (!final && (text.length <= this.prefixText.length || text.endsWith(REPLACEMENT_CHARACTER))) return "";
    // The window's text normally extends the emitted prefix's text; if a decoder
    // rewrote it, the characters past the prefix's length are still the new ones.
    const piece = text.length > this.prefixText.length ? text.slice(this.prefixText.length) : "";
    const emitted = this.ids.slice(this.readStart);
    this.ids = emitted;
    this.readStart = emitted.length;
    this.prefixText = this.decode(emitted);
    return piece;
  }
}
