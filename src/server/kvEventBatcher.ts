/**
 * The prefix cache's changes gathered into batches: the events of one event-loop turn (an engine
 * step) make one batch, handed on when the turn is over (vLLM publishes a step's events together).
 */
import { allBlocksClearedEvent, blockRemovedEvent, blockStoredEvents, type BlockHashEncoding, type KvCacheEvent } from "../kv/kvEventBatch.ts";
import type { KvCacheGroupTag, PrefixCacheEvents, StoredPrefixBlock } from "../kv/prefixBlockCache.ts";

export class KvEventBatcher implements PrefixCacheEvents {
  private pending: KvCacheEvent[] = [];
  private flushScheduled = false;
  private stopped = false;
  /** Events handed on so far. */
  events = 0;

  constructor(
    private readonly hashes: BlockHashEncoding,
    private readonly publish: (events: KvCacheEvent[]) => void,
  ) {}

  stored(blocks: readonly StoredPrefixBlock[]): void {
    this.add(blockStoredEvents(blocks, this.hashes));
  }

  removed(hashes: readonly string[], group?: KvCacheGroupTag): void {
    if (hashes.length > 0) this.add([blockRemovedEvent(hashes, this.hashes, group)]);
  }

  cleared(): void {
    this.add([allBlocksClearedEvent()]);
  }

  /** Hands on the events gathered so far as one batch now. */
  flush(): void {
    this.flushScheduled = false;
    if (this.pending.length === 0 || this.stopped) return;
    const events = this.pending;
    this.pending = [];
    this.events += events.length;
    this.publish(events);
  }

  /** Forgets the events gathered and not yet handed on. */
  discard(): void {
    this.pending = [];
  }

  /** Hands on what is pending; later events are ignored. */
  stop(): void {
    this.flush();
    this.stopped = true;
  }

  private add(events: readonly KvCacheEvent[]): void {
    if (this.stopped || events.length === 0) return;
    this.pending.push(...events);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flush());
  }
}
