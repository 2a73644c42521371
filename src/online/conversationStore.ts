/**
 * What each conversation has been sent: block key -> the label it had when it
 * was first sent (e.g. "[Doc 2]"). Conversations are isolated from each other.
 * Beyond `maxConversations`, or while their estimated heap bytes exceed
 * `maxBytes`, the least recently used conversations are forgotten whole (the
 * one just recorded too, when it alone is over the budget).
 */
import { BudgetedLru } from "./budgetedLru.ts";
import { CONVERSATION_BYTES, CONVERSATION_ENTRY_BYTES, estimatedStringBytes } from "./memoryEstimates.ts";

export type ConversationEntries = [key: string, label: string][];

export interface ConversationStoreOptions {
  maxConversations?: number;
  /** Estimated heap bytes of every conversation together (null: unlimited). */
  maxBytes?: number | null;
}

export class ConversationStore {
  private readonly conversations: BudgetedLru<Map<string, string>>;

  constructor(options: ConversationStoreOptions = {}) {
    this.conversations = new BudgetedLru({ maxEntries: options.maxConversations ?? 100_000, maxBytes: options.maxBytes ?? null });
  }

  get size(): number {
    return this.conversations.size;
  }

  /** Estimated heap bytes of all conversations. */
  get bytes(): number {
    return this.conversations.bytes;
  }

  get byteLimit(): number | null {
    return this.conversations.byteLimit;
  }

  /** Conversations forgotten because the store was over its byte budget. */
  get evictedForByteBudget(): number {
    return this.conversations.evictedForByteBudget;
  }

  /** The earlier label of `key` in the conversation, if it was sent before. */
  labelOf(conversationId: string, key: string): string | undefined {
    return this.conversations.peek(conversationId)?.get(key);
  }

  /**
   * Records blocks as sent; keeps the first label of a key, unless `replace(key)` says the new
   * one wins (another instance's earlier write, see src/state/pendingChanges.ts). Returns
   * conversations forgotten to make room.
   */
  record(conversationId: string, entries: ConversationEntries, replace?: (key: string) => boolean): string[] {
    const seen = this.conversations.use(conversationId, () => new Map(), CONVERSATION_BYTES + estimatedStringBytes(conversationId));
    let added = 0;
    for (const [key, label] of entries) {
      const before = seen.get(key);
      if (before !== undefined) {
        if (before === label || replace === undefined || !replace(key)) continue;
        added += estimatedStringBytes(label) - estimatedStringBytes(before);
      } else added += CONVERSATION_ENTRY_BYTES + estimatedStringBytes(key) + estimatedStringBytes(label);
      seen.set(key, label);
    }
    this.conversations.grow(conversationId, added);
    return this.conversations.enforce();
  }

  forget(conversationId: string): void {
    this.conversations.forget(conversationId);
  }

  clear(): void {
    this.conversations.clear();
  }

  /** Oldest first, so replaying `record` in this order restores the LRU order too. */
  export(): [string, ConversationEntries][] {
    return [...this.conversations.entries()].map(([id, seen]) => [id, [...seen]]);
  }
}
