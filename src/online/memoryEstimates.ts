/**
 * Estimated heap bytes of the state clients can grow, for the byte budgets
 * of `ctxr serve` (--max-index-bytes, --max-dedup-bytes, --max-history-bytes,
 * --max-routing-bytes). The constants were measured on Bun 1.4 (JavaScriptCore)
 * with scripts/measure-state-bytes.ts: live heap growth divided by the count of
 * each kind of entry, rounded up. Strings count two bytes a character, the
 * most a JavaScriptCore string takes.
 */

/** A live-index node: the object, its children Map and request-id Set, an LRU heap entry. */
export const NODE_BYTES = 480;
/** A request id held by the index (its Map entry and Set entry), besides its characters. */
export const REQUEST_ID_BYTES = 96;
/** A block of an edge (Int32Array element) plus per-block arrays (tokens, members, references). */
export const EDGE_BLOCK_BYTES = 4;
/** A block number's per-block arrays in the index (tokens, member stamps and positions, references). */
export const BLOCK_SLOT_BYTES = 16;
/** A key in a key table: the Map entry and the array slot, besides its characters. */
export const KEY_ENTRY_BYTES = 96;
/** A conversation: its Map, besides its entries. */
export const CONVERSATION_BYTES = 256;
/** An entry of a conversation (Map entry), besides its key's and label's characters. */
export const CONVERSATION_ENTRY_BYTES = 64;

export function estimatedStringBytes(text: string): number {
  return 24 + 2 * text.length;
}
