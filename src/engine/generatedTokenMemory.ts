/**
 * The token ids of chats the engine answered, by the text they stand for, so that the next turn of
 * a conversation is prompted with the very ids that were computed (and whose KV the prefix cache
 * holds) rather than with a fresh tokenization of the answer's text, which may differ: a sampled
 * answer need not be the canonical tokenization of its own text.
 *
 * An entry is ids and the text they decode to exactly. A prompt text that starts with an entry's
 * text, cut where tokenizing the two sides apart gives the same ids as tokenizing the whole (the
 * caller's `splitsAt`, in front of an added token the tokenizer matches whole), is the entry's ids
 * followed by the tokenization of the rest. Entries are found by a hash of their text and checked
 * character for character; the least recently used go first past `maxTokens` ids or `maxEntries`.
 * A conversation keeps its last two: remembering a turn drops the entries its text extends but
 * the longest (the turn before, which a regenerated turn resends), so that a long conversation
 * holds about twice its length in ids, not the sum of all its turns.
 * Entries are kept apart by the requests' cache salt (vLLM's cache_salt), as prefix-cache blocks
 * are: a prompt's ids (and so its token count) never tell one tenant what another's chats held.
 */
import { createHash, type Hash } from "node:crypto";

export interface GeneratedTokenMemoryOptions {
  /** Most ids held, all entries together (default 1,048,576: 4 MiB of ids). */
  maxTokens?: number;
  /** Most entries (default 1,024). */
  maxEntries?: number;
}

/** A remembered text the prompt starts with: its ids, and its length in the prompt text (UTF-16 units). */
export interface RememberedPrefix {
  ids: Int32Array;
  length: number;
}

interface Entry {
  key: string;
  text: string;
  ids: Int32Array;
}

const DEFAULT_MAX_TOKENS = 1 << 20;
const DEFAULT_MAX_ENTRIES = 1024;

function textHash(hash: Hash): string {
  return hash.digest("base64");
}

function entryKey(salt: string, length: number, hash: string): string {
  return `${salt.length}:${salt}|${length}:${hash}`;
}

export class GeneratedTokenMemory {
  private readonly maxTokens: number;
  private readonly maxEntries: number;
  /** Least recently used first. */
  private readonly entries = new Map<string, Entry>();
  /** How many entries have a text of each length. */
  private readonly lengths = new Map<number, number>();
  private heldTokens = 0;

  constructor(options: GeneratedTokenMemoryOptions = {}) {
    this.maxTokens = options.maxTokens ?? DEFAULT_MAX_TOKENS;
    this.maxEntries = options.maxEntries ?? DEFAULT_MAX_ENTRIES;
    for (const [name, value] of [["maxTokens", this.maxTokens], ["maxEntries", this.maxEntries]] as const) {
      if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer, got ${value}`);
    }
  }

  get size(): number {
    return this.entries.size;
  }

  get tokens(): number {
    return this.heldTokens;
  }

  /** Remembers ids as the text they decode to exactly (the caller's decode), under `salt`; one longer than maxTokens is not kept. */
  remember(ids: readonly number[], text: string, salt = ""): void {
    if (ids.length === 0 || text.length === 0 || ids.length > this.maxTokens) return;
    const key = entryKey(salt, text.length, textHash(createHash("sha256").update(text)));
    const extended = this.prefixEntries(text, salt, () => true).filter((entry) => entry.text.length < text.length);
    for (const entry of extended.slice(0, -1)) this.drop(entry.key);
    this.drop(key);
    this.entries.set(key, { key, text, ids: Int32Array.from(ids) });
    this.lengths.set(text.length, (this.lengths.get(text.length) ?? 0) + 1);
    this.heldTokens += ids.length;
    for (const oldest of this.entries.values()) {
      if (this.heldTokens <= this.maxTokens && this.entries.size <= this.maxEntries) break;
      this.drop(oldest.key);
    }
  }

  /**
   * The longest text remembered under `salt` that `text` starts with, cut where `splitsAt`
   * allows: its ids, or null. One pass of hashing over the text, however many entries there are.
   */
  longestPrefix(text: string, splitsAt: (at: number) => boolean, salt = ""): RememberedPrefix | null {
    const entry = this.prefixEntries(text, salt, splitsAt).at(-1);
    if (entry === undefined) return null;
    this.entries.delete(entry.key);
    this.entries.set(entry.key, entry);
    return { ids: entry.ids, length: entry.text.length };
  }

  /** The entries under `salt` whose text `text` starts with, cut where `cutAt` allows (or the whole text), shortest first. */
  private prefixEntries(text: string, salt: string, cutAt: (at: number) => boolean): Entry[] {
    const lengths = [...this.lengths.keys()].filter((length) => length <= text.length).sort((a, b) => a - b);
    const found: Entry[] = [];
    const hash = createHash("sha256");
    let hashed = 0;
    for (const length of lengths) {
      if (length < text.length && !cutAt(length)) continue;
      hash.update(text.slice(hashed, length));
      hashed = length;
      const entry = this.entries.get(entryKey(salt, length, textHash(hash.copy())));
      if (entry !== undefined && text.startsWith(entry.text)) found.push(entry);
    }
    return found;
  }

  private drop(key: string): void {
    const entry = this.entries.get(key);
    if (entry === undefined) return;
    this.entries.delete(key);
    this.heldTokens -= entry.ids.length;
    const count = this.lengths.get(entry.text.length)! - 1;
    if (count === 0) this.lengths.delete(entry.text.length);
    else this.lengths.set(entry.text.length, count);
  }
}
