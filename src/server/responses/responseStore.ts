/**
 * Stored responses, for previous_response_id and item_reference: each keeps the conversation it
 * ended (the chat messages of its continued conversation, its input and its output, without
 * instructions) and its items by id. In memory, least recently used forgotten first, bounded by a
 * count and by estimated heap bytes as the proxy's conversation histories are
 * (src/online/budgetedLru.ts); a forgotten response answers 404 like one never stored.
 */
import { BudgetedLru } from "../../online/budgetedLru.ts";
import { estimatedStringBytes } from "../../online/memoryEstimates.ts";
import type { ChatMessage } from "./responsesInput.ts";

/** A stored response's Map entries and bookkeeping, besides its JSON. */
const STORED_RESPONSE_BYTES = 512;

export const DEFAULT_MAX_STORED_RESPONSES = 100_000;

export interface StoredResponse {
  conversation: ChatMessage[];
  /** Input and output items with an id, as the client sent or was sent them. */
  items: Map<string, Record<string, unknown>>;
}

export interface ResponseStoreOptions {
  /** Estimated heap bytes of all stored responses (null: unlimited). */
  maxBytes: number | null;
  maxResponses?: number;
}

export class ResponseStore {
  private readonly responses: BudgetedLru<StoredResponse>;
  /** Item id → the response holding it. */
  private readonly itemOwners = new Map<string, string>();
  /** Response id → its item ids (kept apart so that a response the LRU already dropped can be unindexed). */
  private readonly itemsOf = new Map<string, string[]>();

  constructor(options: ResponseStoreOptions) {
    this.responses = new BudgetedLru({ maxEntries: options.maxResponses ?? DEFAULT_MAX_STORED_RESPONSES, maxBytes: options.maxBytes });
  }

  get size(): number {
    return this.responses.size;
  }

  get bytes(): number {
    return this.responses.bytes;
  }

  /** Responses forgotten because the store was over its byte budget. */
  get evictedForByteBudget(): number {
    return this.responses.evictedForByteBudget;
  }

  /** The stored response (now the most recently used), or undefined. */
  get(id: string): StoredResponse | undefined {
    const stored = this.responses.peek(id);
    if (stored !== undefined) this.responses.use(id, () => stored, 0);
    return stored;
  }

  /** A stored item by its id, or undefined. */
  item(id: string): Record<string, unknown> | undefined {
    const owner = this.itemOwners.get(id);
    return owner === undefined ? undefined : this.responses.peek(owner)?.items.get(id);
  }

  put(id: string, stored: StoredResponse): void {
    this.forget(id);
    let bytes: number;
    try {
      bytes = STORED_RESPONSE_BYTES + estimatedStringBytes(id) + estimatedStringBytes(JSON.stringify(stored.conversation)) + estimatedStringBytes(JSON.stringify([...stored.items]));
    } catch {
      return;
    }
    this.responses.use(id, () => stored, bytes);
    for (const itemId of stored.items.keys()) this.itemOwners.set(itemId, id);
    this.itemsOf.set(id, [...stored.items.keys()]);
    for (const forgotten of this.responses.enforce()) this.dropItems(forgotten);
  }

  forget(id: string): void {
    this.dropItems(id);
    this.responses.forget(id);
  }

  clear(): void {
    this.responses.clear();
    this.itemOwners.clear();
    this.itemsOf.clear();
  }

  private dropItems(id: string): void {
    for (const itemId of this.itemsOf.get(id) ?? []) if (this.itemOwners.get(itemId) === id) this.itemOwners.delete(itemId);
    this.itemsOf.delete(id);
  }
}
