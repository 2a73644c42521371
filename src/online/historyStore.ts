/**
 * The proxy's memory of each conversation: (hash of an original message ->
 * the content it was forwarded as), so later turns resend earlier messages
 * byte for byte. Bounded by a count of conversations and by estimated heap
 * bytes; the least recently used conversations are forgotten whole (the one
 * just remembered too, when it alone is over the budget: its next turn is then
 * rewritten afresh, which costs prefix reuse, not correctness).
 */
import { BudgetedLru } from "./budgetedLru.ts";
import { estimatedStringBytes } from "./memoryEstimates.ts";

/** A remembered conversation's Map and bookkeeping, besides its entries. */
const HISTORY_BYTES = 256;
/** A remembered message's Map entry, besides its key and content. */
const MESSAGE_ENTRY_BYTES = 64;

export interface HistoryStoreOptions {
  maxConversations?: number;
  /** Estimated heap bytes of all histories (null: unlimited). */
  maxBytes?: number | null;
  /** Told of every `remember` (state shared with other instances sends it on). */
  onRemember?: (conversationId: string, messages: readonly [key: string, content: unknown][]) => void;
}

/** Estimated heap bytes of a message's content (a string, or the parts of a multimodal message). */
export function contentBytes(content: unknown): number {
  if (typeof content === "string") return estimatedStringBytes(content);
  try {
    return estimatedStringBytes(JSON.stringify(content) ?? "");
  } catch {
    return Number.MAX_SAFE_INTEGER;
  }
}

export class HistoryStore {
  private readonly histories: BudgetedLru<Map<string, unknown>>;
  private readonly onRemember: HistoryStoreOptions["onRemember"];

  constructor(options: HistoryStoreOptions = {}) {
    this.histories = new BudgetedLru({ maxEntries: options.maxConversations ?? 10_000, maxBytes: options.maxBytes ?? null });
    this.onRemember = options.onRemember;
  }

  get size(): number {
    return this.histories.size;
  }

  get bytes(): number {
    return this.histories.bytes;
  }

  get byteLimit(): number | null {
    return this.histories.byteLimit;
  }

  /** Conversations forgotten because the store was over its byte budget. */
  get evictedForByteBudget(): number {
    return this.histories.evictedForByteBudget;
  }

  /** What `key` was forwarded as in the conversation, if remembered. Changes nothing. */
  forwardedAs(conversationId: string, key: string): unknown {
    return this.histories.peek(conversationId)?.get(key);
  }

  /** Remembers messages as forwarded (the conversation becomes the most recently used). */
  remember(conversationId: string, messages: readonly [key: string, content: unknown][]): void {
    this.store(conversationId, messages, () => true);
    if (messages.length > 0) this.onRemember?.(conversationId, messages);
  }

  /**
   * Another instance's `remember`: a message already remembered keeps its content unless
   * `replace(key)` says the other write came first (src/state/pendingChanges.ts).
   */
  rememberShared(conversationId: string, messages: readonly [key: string, content: unknown][], replace: (key: string) => boolean): void {
    this.store(conversationId, messages, replace);
  }

  /** Oldest conversation first, so storing them in this order restores the LRU order too. */
  export(): [string, [string, unknown][]][] {
    return [...this.histories.entries()].map(([id, history]) => [id, [...history]]);
  }

  private store(conversationId: string, messages: readonly [key: string, content: unknown][], replace: (key: string) => boolean): void {
    const history = this.histories.use(conversationId, () => new Map(), HISTORY_BYTES + estimatedStringBytes(conversationId));
    let change = 0;
    for (const [key, content] of messages) {
      const before = history.get(key);
      if (before !== undefined && !replace(key)) continue;
      const entryBytes = MESSAGE_ENTRY_BYTES + estimatedStringBytes(key);
      change += entryBytes + contentBytes(content) - (before === undefined ? 0 : entryBytes + contentBytes(before));
      history.set(key, content);
    }
    this.histories.grow(conversationId, change);
    this.histories.enforce();
  }

  clear(): void {
    this.histories.clear();
  }
}
