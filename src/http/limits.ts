/**
 * Request limits of the HTTP server: what one request may carry. The body size
 * and the per-request counts are flags of `ctxr serve`; string lengths are fixed.
 */
export interface ServerLimits {
  /** Largest request body in bytes (413 beyond). */
  maxBodyBytes: number;
  /** Contexts in one reorder or schedule request. */
  maxContexts: number;
  /** Blocks in one context (and in one dedup turn). */
  maxBlocks: number;
  /** Request ids in one evict request. */
  maxRequestIds: number;
  /** Characters of a block id (and of a request id). */
  maxIdChars: number;
  /** Characters of a conversation id. */
  maxConversationIdChars: number;
  /** Characters of a block's text. */
  maxTextChars: number;
  /** Characters of an annotation template. */
  maxTemplateChars: number;
  /** Times a template may contain its placeholder ({order}, {n}, {doc}). */
  maxTemplatePlaceholders: number;
  /** Largest "tokens" of a block (the index stores token counts as 32-bit integers). */
  maxBlockTokens: number;
  /** Contexts a /v1/schedule request may give method "cluster" (its time and memory grow as N²). */
  maxClusterContexts: number;
  /** Levels of JSON nesting a request body may have (arrays and objects; the body itself is level 1). */
  maxJsonDepth: number;
}

export const DEFAULT_LIMITS: ServerLimits = {
  maxBodyBytes: 8 * 1024 * 1024,
  maxContexts: 1024,
  maxBlocks: 1024,
  maxRequestIds: 100_000,
  maxIdChars: 1024,
  maxConversationIdChars: 256,
  maxTextChars: 1024 * 1024,
  maxTemplateChars: 4096,
  maxTemplatePlaceholders: 4,
  maxBlockTokens: 1_000_000_000,
  maxClusterContexts: 12_000,
  maxJsonDepth: 64,
};

export function withDefaultLimits(limits: Partial<ServerLimits> = {}): ServerLimits {
  const merged = { ...DEFAULT_LIMITS };
  for (const [key, value] of Object.entries(limits) as [keyof ServerLimits, number | undefined][]) {
    if (value !== undefined) merged[key] = value;
  }
  return merged;
}
