/**
 * POST /v1/evict bodies: request ids (`{"request_ids": [...]}`), or engine
 * KV-cache event batches as vLLM and SGLang publish them, relayed as JSON:
 * `{"ts"?, "events": [{"type": "BlockRemoved", "request_ids": [...]}, {"type": "AllBlocksCleared"}, ...], "upstream"?}`
 * or a list of such batches. Events apply in order. BlockRemoved removes the
 * contexts of its request ids; AllBlocksCleared removes every context routed
 * to the batch's `upstream` (its URL as /v1/stats shows it, or its 0-based
 * position), or every context when the batch names none. Other event types
 * (BlockStored, …) and events in array form other than AllBlocksCleared carry
 * nothing to act on and are ignored.
 */
export interface KvEventObject {
  type: string;
  request_ids?: string[];
  [key: string]: unknown;
}

export interface KvEventBatch {
  events: (KvEventObject | unknown[])[];
  upstream?: string | number;
  [key: string]: unknown;
}

export type EvictBody = { request_ids: string[] } | KvEventBatch | KvEventBatch[];

export interface EvictTarget {
  /** Removes contexts by reported request ids; returns how many were removed. */
  evict(requestIds: string[]): Promise<number>;
  /** An engine cleared its cache; returns how many contexts were removed. `field` names the selector in errors. */
  clearEngine(selector: string | number | undefined, field: string): Promise<number>;
}

export async function applyEvictBody(body: EvictBody, target: EvictTarget): Promise<number> {
  if (!Array.isArray(body) && "request_ids" in body && !("events" in body)) return target.evict(body.request_ids as string[]);
  const batches = Array.isArray(body) ? body : [body as KvEventBatch];
  let evicted = 0;
  let pending: string[] = [];
  const flush = async () => {
    if (pending.length > 0) evicted += await target.evict(pending);
    pending = [];
  };
  for (const [b, batch] of batches.entries()) {
    for (const event of batch.events) {
      const type = Array.isArray(event) ? event[0] : event.type;
      if (type === "BlockRemoved" && !Array.isArray(event) && event.request_ids !== undefined) pending.push(...event.request_ids);
      else if (type === "AllBlocksCleared") {
        await flush();
        evicted += await target.clearEngine(batch.upstream, Array.isArray(body) ? `[${b}].upstream` : "upstream");
      }
    }
  }
  await flush();
  return evicted;
}
