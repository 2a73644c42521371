/**
 * Byte budgets of the state clients can grow, with their defaults (flags of
 * `ctxr serve`). Together with Bun's own footprint the defaults keep the server
 * under 1 GB whatever clients send (scripts/bench-hostile.ts measures it).
 */
const MiB = 1024 * 1024;

export interface StateBudgets {
  /** The live index: contexts, nodes, request ids and the block-key table (--max-index-bytes). */
  indexBytes: number;
  /** Dedup conversation records (--max-dedup-bytes). */
  dedupBytes: number;
  /** The proxy's remembered conversation histories (--max-history-bytes). */
  historyBytes: number;
  /** The proxy's routing indexes and their key table, all upstreams together (--max-routing-bytes). */
  routingBytes: number;
  /** Rendered annotations of one request (--max-annotation-bytes). */
  annotationBytes: number;
  /** Stored /v1/responses responses, for previous_response_id (--max-response-bytes). */
  responseBytes: number;
}

export const DEFAULT_BUDGETS: StateBudgets = {
  indexBytes: 128 * MiB,
  dedupBytes: 64 * MiB,
  historyBytes: 128 * MiB,
  routingBytes: 32 * MiB,
  annotationBytes: 16 * MiB,
  responseBytes: 64 * MiB,
};
