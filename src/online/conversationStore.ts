/**
 * What each conversation has been sent: block key -> the label it had when it
 * was first sent (e.g. "[Doc 2]"). Conversations are isolated from each other;
 * beyond `maxConversations` the least recently used one is forgotten.
 */
export type ConversationEntries = [key: string, label: string][];

export class ConversationStore {
  // Map iteration order doubles as the LRU order: a used conversation is re-inserted at the end.
  private readonly conversations = new Map<string, Map<string, string>>();

  constructor(private readonly maxConversations = 100_000) {}

  get size(): number {
    return this.conversations.size;
  }

  /** The earlier label of `key` in the conversation, if it was sent before. */
  labelOf(conversationId: string, key: string): string | undefined {
    return this.conversations.get(conversationId)?.get(key);
  }

  /** Records blocks as sent; keeps the first label of a key. Returns conversations forgotten to make room. */
  record(conversationId: string, entries: ConversationEntries): string[] {
    let seen = this.conversations.get(conversationId);
    if (seen === undefined) seen = new Map();
    else this.conversations.delete(conversationId);
    this.conversations.set(conversationId, seen);
    for (const [key, label] of entries) if (!seen.has(key)) seen.set(key, label);
    const forgotten: string[] = [];
    while (this.conversations.size > this.maxConversations) {
      const oldest = this.conversations.keys().next().value as string;
      this.conversations.delete(oldest);
      forgotten.push(oldest);
    }
    return forgotten;
  }

  forget(conversationId: string): void {
    this.conversations.delete(conversationId);
  }

  clear(): void {
    this.conversations.clear();
  }

  /** Oldest first, so replaying `record` in this order restores the LRU order too. */
  export(): [string, ConversationEntries][] {
    return [...this.conversations].map(([id, seen]) => [id, [...seen]]);
  }
}
