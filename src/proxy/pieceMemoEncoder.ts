/**
 * The proxy's prompt tokenization (enginePromptTokens.ts) sits on every forwarded request's path,
 * and @huggingface/tokenizers takes about 0.12 µs a character (7 ms for a 60 kB prompt). For the
 * byte-level BPE tokenizers of GPT-2, Llama 3 and Qwen2 (preTokenizerRegex.ts: the text split at
 * added tokens, NFC-normalized for Qwen2, then split by a regex into pieces, each piece encoded on
 * its own) the ids of a text are the concatenation of its pieces' ids, so each distinct piece is
 * encoded once by the library and remembered. Other tokenizers get null (the library then encodes
 * whole prompts).
 *
 * Above the pieces, spans: prompts repeat long texts (documents, chat histories), so the ids of
 * each span between boundaries where a piece always ends (promptSpans.ts) are remembered too,
 * within a byte budget (generationalMemo.ts); a prompt whose spans are all known costs a boundary
 * scan, one lookup a span and copying the ids.
 *
 * Exact for this family: a piece encoded alone splits into itself again, BPE never merges across
 * pieces, and spans split where pieces end (knownSplitPatterns.ts has the proofs). The routing keys
 * only depend on it (a mismatch would cost a cache miss, never an answer);
 * test/proxy/pieceMemoEncoder.test.ts compares it with the library on varied texts.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { GenerationalMemo } from "./generationalMemo.ts";
import { pieceSplitting, type PieceSplitting } from "./preTokenizerRegex.ts";
import { addedTokenAt, spanEnd, type AddedTokenAt } from "./promptSpans.ts";

/** Pieces remembered before the piece memo starts afresh (bounds memory: ~100 bytes each). */
const MAX_PIECES = 200_000;
/** The span memos' budget (estimated: UTF-16 keys, 8 bytes an id). */
const SPAN_MEMO_BYTES = 64 * 1024 * 1024;
/** Stands for the non-whitespace character after a span boundary (any gives the same pieces). */
const FOLLOWER = "x";

interface AddedToken {
  content: string;
  lstrip?: boolean;
  rstrip?: boolean;
  single_word?: boolean;
  normalized?: boolean;
  special?: boolean;
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const spanBytes = (key: string, ids: readonly number[]) => 2 * key.length + 8 * ids.length + 96;

/** The parts joined (concat copies whole arrays: ~3× faster than pushing id by id), a bounded number of arguments a call. */
function concatIds(parts: readonly (readonly number[])[]): number[] {
  const CHUNK = 4096;
  if (parts.length <= CHUNK) return ([] as number[]).concat(...parts);
  const chunks: number[][] = [];
  for (let i = 0; i < parts.length; i += CHUNK) chunks.push(([] as number[]).concat(...parts.slice(i, i + CHUNK)));
  return ([] as number[]).concat(...chunks);
}

export interface PieceMemoOptions {
  /** The span memos' budget in bytes (0: no span memo). */
  spanMemoBytes?: number;
}

export class PieceMemoEncoder {
  private readonly pieces = new Map<string, readonly number[]>();
  /** Spans followed by a boundary, and prompts' last spans (split as the text's end). */
  private readonly spans: GenerationalMemo<readonly number[]>;
  private readonly lastSpans: GenerationalMemo<readonly number[]>;

  private constructor(
    /** The library's encode of a text (no special tokens added). */
    private readonly encodeText: (text: string) => number[],
    private readonly splitting: PieceSplitting,
    /** Added tokens, longest first (null: none). */
    private readonly addedTokens: RegExp | null,
    /** Where added tokens start; null: no spans (an added token holds a "\n"). */
    private readonly addedAt: AddedTokenAt | null,
    spanMemoBytes: number,
  ) {
    this.spans = new GenerationalMemo(spanMemoBytes / 2, spanBytes);
    this.lastSpans = new GenerationalMemo(spanMemoBytes / 2, spanBytes);
  }

  /** For the model folder's tokenizer.json when it is of the family; null otherwise. */
  static async load(dir: string, encodeText: (text: string) => number[], options: PieceMemoOptions = {}): Promise<PieceMemoEncoder | null> {
    let config: any;
    try {
      config = JSON.parse(await readFile(join(dir, "tokenizer.json"), "utf8"));
    } catch {
      return null;
    }
    const splitting = pieceSplitting(config);
    const model = config?.model;
    const added: AddedToken[] = Array.isArray(config?.added_tokens) ? config.added_tokens : [];
    const family =
      splitting !== null &&
      model?.type === "BPE" &&
      !model.dropout &&
      !model.continuing_subword_prefix &&
      !model.end_of_word_suffix &&
      added.every(
        (t) =>
          typeof t.content === "string" &&
          t.content !== "" &&
          !t.lstrip &&
          !t.rstrip &&
          !t.single_word &&
          // With a normalizer, added tokens matched in the normalized text are not reproduced.
          (!splitting.nfc || (t.normalized ?? !t.special) === false),
      );
    if (!family) return null;
    const contents = added.map((t) => t.content).sort((a, b) => b.length - a.length);
    const addedTokens = contents.length === 0 ? null : new RegExp(contents.map(escape).join("|"), "g");
    const addedAt = contents.some((c) => c.includes("\n")) ? null : addedTokenAt(contents);
    const spanMemoBytes = options.spanMemoBytes ?? SPAN_MEMO_BYTES;
    return new PieceMemoEncoder(encodeText, splitting!, addedTokens, spanMemoBytes > 0 ? addedAt : null, spanMemoBytes);
  }

  encode(text: string): number[] {
    if (this.addedAt === null) {
      const ids: number[] = [];
      this.encodeSpan(text, false, ids);
      return ids;
    }
    const parts: (readonly number[])[] = [];
    for (let start = 0; start < text.length; ) {
      const end = spanEnd(text, start, this.addedAt);
      const last = end === text.length;
      const span = start === 0 && last ? text : text.slice(start, end);
      const memo = last ? this.lastSpans : this.spans;
      let spanIds = memo.get(span);
      if (spanIds === undefined) {
        const fresh: number[] = [];
        this.encodeSpan(span, !last, fresh);
        memo.set(span, fresh);
        spanIds = fresh;
      }
      parts.push(spanIds);
      start = end;
    }
    return concatIds(parts);
  }

  /** The span's ids, split at added tokens; `followed`: a non-whitespace character follows it. */
  private encodeSpan(span: string, followed: boolean, ids: number[]): void {
    if (this.addedTokens === null) {
      this.encodeSection(span, followed, ids);
      return;
    }
    let start = 0;
    for (const match of span.matchAll(this.addedTokens)) {
      if (match.index > start) this.encodeSection(span.slice(start, match.index), false, ids);
      this.encodePiece(match[0], ids);
      start = match.index + match[0].length;
    }
    // A followed span ends with a "\n" (no added token holds one), so its last section is this one.
    if (start < span.length) this.encodeSection(start === 0 ? span : span.slice(start), followed, ids);
  }

  private encodeSection(raw: string, followed: boolean, ids: number[]): void {
    const section = this.splitting.nfc ? raw.normalize("NFC") : raw;
    const text = followed ? section + FOLLOWER : section;
    const regex = this.splitting.regex;
    regex.lastIndex = 0;
    let at = 0;
    while (at < section.length) {
      const match = regex.exec(text);
      const index = match === null ? text.length : match.index;
      // Text no alternative matches is a piece of its own (the Split pre-tokenizer's Isolated behavior).
      if (index > at) this.encodePiece(text.slice(at, Math.min(index, section.length)), ids);
      if (match === null || index >= section.length) break;
      const end = index + match[0].length;
      if (end > section.length) throw new Error("a piece crosses a span boundary");
      if (end === index) regex.lastIndex++;
      else this.encodePiece(match[0], ids);
      at = end;
    }
  }

  private encodePiece(piece: string, ids: number[]): void {
    let pieceIds = this.pieces.get(piece);
    if (pieceIds === undefined) {
      if (this.pieces.size >= MAX_PIECES) this.pieces.clear();
      pieceIds = this.encodeText(piece);
      this.pieces.set(piece, pieceIds);
    }
    for (let i = 0; i < pieceIds.length; i++) ids.push(pieceIds[i]!);
  }
}
