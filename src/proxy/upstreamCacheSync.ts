/**
 * One upstream's cache, kept in sync from its KV events (issue 13). It keeps the content keys of
 * the blocks in the engine's own KV memory (engineCacheFeed.ts says which: events of offload tiers
 * are counted, not mirrored, since a block on the host is not a prefix-cache hit), and the
 * contexts (request ids) whose prompts' blocks the engine took in, so that a context leaves
 * the proxy's live index when one of its blocks leaves the engine — exactly, instead of by the
 * capacity/TTL estimate.
 *
 * A context is tracked by its prompt's last block only. Engines drop a chain from its end: a block
 * goes only after the blocks that extend it (LRU caches evicting leaves first, as ctxr's and the
 * fake engine's; SGLang's radix tree; vLLM frees a request's blocks last one first), so the last
 * block is the first of the prompt's to go. One key per context instead of one per block keeps
 * `track` cheap on the request path (a 60K-token prompt has 3,790 blocks: 5.8 ms a request) and its
 * memory bounded by the contexts tracked.
 */
import type { ContentKey } from "./contentKey.ts";
import { EngineCacheFeed, type AppliedBatch, type CacheKeySink } from "./engineCacheFeed.ts";
import type { MirrorStats } from "./engineCacheMirror.ts";
import type { KvEventBatchIn, KvEventConsumer, KvEventResyncReason } from "./kvEventSubscriber.ts";
import { heldPrefixLength } from "../kv/prefixBlockCache.ts";

/** Contexts tracked per upstream before the oldest are forgotten (bounds memory). */
const TRACKED_CONTEXTS = 100_000;

export interface CacheSyncStats {
  /** Engine blocks mirrored, and their tokens. */
  blocks: number;
  tokens: number;
  orphans: number;
  /** Events of offload tiers (CPU, disk), not mirrored. */
  offloadEvents: number;
  /** Events of a hybrid model's KV cache groups other than the followed full-attention one, not mirrored. */
  otherGroupEvents: number;
  /** Now minus the last batch's engine timestamp when it arrived, ms (null before any). */
  lagMs: number | null;
  /** Contexts evicted because the engine dropped one of their blocks. */
  contextsEvicted: number;
  /** Estimated heap bytes of the mirror (counted in the routing bytes, --max-routing-bytes), and blocks it forgot to stay within its share. */
  bytes: number;
  evictedForBytes: number;
  connected: boolean;
}

/**
 * The sink of an EngineCacheFeed: fed from the KV-events thread (kvEventsThread.ts), or in process
 * as a KvEventConsumer (its batches go through a feed of its own).
 */
export class UpstreamCacheSync implements KvEventConsumer, CacheKeySink {
  /**
   * Whether routing may trust the mirror: the subscriber is connected and has caught up (the
   * replay of the engine's buffer ended), or a batch has come since it connected.
   */
  live = false;
  /** The engine's block size, from its events (null until the first BlockStored). */
  blockSize: number | null = null;
  /** Content keys of the blocks the engine holds. */
  private readonly held = new Set<ContentKey>();
  private mirror: MirrorStats = { blocks: 0, orphans: 0, malformed: 0, unknownRemovals: 0, bytes: 0, evictedForBytes: 0 };
  /** The mirror's byte budget when this sync feeds itself in process (the KV-events thread is given its own). */
  maxMirrorBytes: number | null = null;
  /** The feed of batches given in process (null when the KV-events thread feeds this). */
  private feed: EngineCacheFeed | null = null;
  private awaitingBatch = false;
  private lagMs: number | null = null;
  private offloadEvents = 0;
  private otherGroupEvents = 0;
  private contextsEvicted = 0;
  /** Content key → contexts whose prompt ends with it; context → that key (insertion order: oldest first). */
  private readonly contextsOfKey = new Map<ContentKey, Set<string>>();
  private readonly keyOfContext = new Map<string, ContentKey>();

  /** `evict`: drops contexts from the live index (and routing) when the engine drops their blocks. */
  constructor(
    private readonly evict: (requestIds: string[]) => void,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * How many of `keys` (a prompt's content keys, in order) the engine holds from the first. Engines
   * drop a chain from its end (a block goes after those that extend it), so the blocks of a chain
   * they hold are a prefix of it: a binary search (12 probes for a 60K-token prompt's 3,790 blocks,
   * where a probe per block took 0.24 ms).
   */
  cachedBlocks(keys: readonly ContentKey[]): number {
    return heldPrefixLength(keys, (key) => this.held.has(key));
  }

  /** Whether the engine holds a block with this content key. */
  holds(key: ContentKey): boolean {
    return this.held.has(key);
  }

  batch(batch: KvEventBatchIn): void {
    (this.feed ??= new EngineCacheFeed(this, this.maxMirrorBytes)).batch(batch);
  }

  resync(_reason: KvEventResyncReason): void {
    if (this.feed !== null) this.feed.resync();
    else this.cleared();
  }

  keyHeld(key: ContentKey): void {
    this.held.add(key);
  }

  keyDropped(key: ContentKey): void {
    this.held.delete(key);
    const contexts = this.contextsOfKey.get(key);
    if (contexts === undefined) return;
    const ids = [...contexts];
    for (const id of ids) this.forget(id);
    this.evictContexts(ids);
  }

  /** The engine holds nothing we know of: every tracked context leaves. */
  cleared(): void {
    this.held.clear();
    this.mirror = { ...this.mirror, blocks: 0, bytes: 0 };
    const ids = [...this.keyOfContext.keys()];
    this.keyOfContext.clear();
    this.contextsOfKey.clear();
    this.evictContexts(ids);
  }

  batchApplied(batch: AppliedBatch): void {
    if (this.awaitingBatch) {
      this.awaitingBatch = false;
      this.live = true;
    }
    if (!batch.replayed) this.lagMs = Math.max(0, this.now() - batch.ts * 1000);
    this.blockSize = batch.blockSize ?? this.blockSize;
    this.mirror = batch.mirror;
    this.offloadEvents = batch.offloadEvents;
    this.otherGroupEvents = batch.otherGroupEvents;
  }

  connected(): void {
    this.awaitingBatch = true;
  }

  disconnected(): void {
    this.live = false;
    this.awaitingBatch = false;
  }

  caughtUp(): void {
    this.awaitingBatch = false;
    this.live = true;
  }

  /** A request was sent with these prompt block keys under this id: it leaves when the engine drops the last of them. */
  track(requestId: string, keys: readonly ContentKey[]): void {
    if (keys.length === 0) return;
    this.forget(requestId);
    const key = keys[keys.length - 1]!;
    this.keyOfContext.set(requestId, key);
    let contexts = this.contextsOfKey.get(key);
    if (contexts === undefined) this.contextsOfKey.set(key, (contexts = new Set()));
    contexts.add(requestId);
    if (this.keyOfContext.size > TRACKED_CONTEXTS) this.forget(this.keyOfContext.keys().next().value!);
  }

  get stats(): CacheSyncStats {
    const mirror = this.mirror;
    return {
      blocks: mirror.blocks,
      tokens: mirror.blocks * (this.blockSize ?? 0),
      orphans: mirror.orphans,
      offloadEvents: this.offloadEvents,
      otherGroupEvents: this.otherGroupEvents,
      lagMs: this.lagMs,
      contextsEvicted: this.contextsEvicted,
      bytes: this.mirror.bytes,
      evictedForBytes: this.mirror.evictedForBytes,
      connected: this.live,
    };
  }

  private evictContexts(ids: string[]): void {
    if (ids.length === 0) return;
    this.contextsEvicted += ids.length;
    this.evict(ids);
  }

  private forget(requestId: string): void {
    const key = this.keyOfContext.get(requestId);
    if (key === undefined) return;
    this.keyOfContext.delete(requestId);
    const contexts = this.contextsOfKey.get(key);
    contexts?.delete(requestId);
    if (contexts?.size === 0) this.contextsOfKey.delete(key);
  }
}
