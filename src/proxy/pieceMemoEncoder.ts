/**
 * The proxy's prompt tokenization (enginePromptTokens.ts) sits on every forwarded request's path,
 * and @huggingface/tokenizers takes about 0.12 µs a character (7 ms for a 60 kB prompt). For the
 * common family of byte-level BPE tokenizers (GPT-2's pre-tokenizer: no normalizer, the text split
 * at added tokens, then by GPT-2's regex into pieces, each piece encoded on its own) the ids of a
 * text are the concatenation of its pieces' ids, so each distinct piece is encoded once by the
 * library and remembered. Other tokenizers get null (the library then encodes whole prompts).
 *
 * Exact for this family: a piece encoded alone splits into itself again, and BPE never merges
 * across pieces. The routing keys only depend on it (a mismatch would cost a cache miss, never an
 * answer); test/proxy/pieceMemoEncoder.test.ts compares it with the library on varied texts.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";

/** The ByteLevel pre-tokenizer's regex (GPT-2's), as @huggingface/tokenizers writes it. */
const PIECES = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
/** Pieces remembered before the memo starts afresh (bounds memory: ~100 bytes each). */
const MAX_PIECES = 200_000;

interface AddedToken {
  content: string;
  lstrip?: boolean;
  rstrip?: boolean;
  single_word?: boolean;
}

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

export class PieceMemoEncoder {
  private readonly memo = new Map<string, readonly number[]>();

  private constructor(
    /** The library's encode of a text (no special tokens added). */
    private readonly encodeText: (text: string) => number[],
    /** Added tokens, longest first (null: none). */
    private readonly addedTokens: RegExp | null,
  ) {}

  /** For the model folder's tokenizer.json when it is of the family; null otherwise. */
  static async load(dir: string, encodeText: (text: string) => number[]): Promise<PieceMemoEncoder | null> {
    let config: any;
    try {
      config = JSON.parse(await readFile(join(dir, "tokenizer.json"), "utf8"));
    } catch {
      return null;
    }
    const pre = config?.pre_tokenizer;
    const model = config?.model;
    const added: AddedToken[] = Array.isArray(config?.added_tokens) ? config.added_tokens : [];
    const family =
      config?.normalizer === null &&
      pre?.type === "ByteLevel" &&
      pre.use_regex !== false &&
      pre.add_prefix_space !== true &&
      model?.type === "BPE" &&
      !model.dropout &&
      !model.continuing_subword_prefix &&
      !model.end_of_word_suffix &&
      added.every((t) => typeof t.content === "string" && t.content !== "" && !t.lstrip && !t.rstrip && !t.single_word);
    if (!family) return null;
    const contents = added.map((t) => t.content).sort((a, b) => b.length - a.length);
    return new PieceMemoEncoder(encodeText, contents.length === 0 ? null : new RegExp(contents.map(escape).join("|"), "g"));
  }

  encode(text: string): number[] {
    const ids: number[] = [];
    if (this.addedTokens === null) {
      this.encodeSection(text, ids);
      return ids;
    }
    let start = 0;
    for (const match of text.matchAll(this.addedTokens)) {
      if (match.index > start) this.encodeSection(text.slice(start, match.index), ids);
      this.encodePiece(match[0], ids);
      start = match.index + match[0].length;
    }
    if (start < text.length) this.encodeSection(text.slice(start), ids);
    return ids;
  }

  private encodeSection(section: string, ids: number[]): void {
    for (const match of section.matchAll(PIECES)) this.encodePiece(match[0], ids);
  }

  private encodePiece(piece: string, ids: number[]): void {
    let pieceIds = this.memo.get(piece);
    if (pieceIds === undefined) {
      if (this.memo.size >= MAX_PIECES) this.memo.clear();
      pieceIds = this.encodeText(piece);
      this.memo.set(piece, pieceIds);
    }
    for (let i = 0; i < pieceIds.length; i++) ids.push(pieceIds[i]!);
  }
}
