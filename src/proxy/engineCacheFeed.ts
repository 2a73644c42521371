/**
 * One engine's KV-event batches turned into the content keys its cache gained and lost (issue 13):
 * the EngineCacheMirror (engine hash → content key, as the subscriber feeds it) telling a
 * CacheKeySink. It runs where the subscriber runs — in the KV-events thread (kvEventsThread.ts),
 * so that decoding and keying stay off the proxy's request path, or in process — and the sink,
 * UpstreamCacheSync, keeps only what routing reads: the set of keys held.
 */
import type { ContentKey } from "./contentKey.ts";
import { EngineCacheMirror, type MirrorStats } from "./engineCacheMirror.ts";
import type { KvEventBatchIn, KvEventConsumer } from "./kvEventSubscriber.ts";

/** What a batch left behind, told after its keys. */
export interface AppliedBatch {
  /** The engine's clock when it published the batch, seconds since the epoch. */
  ts: number;
  replayed: boolean;
  /** The engine's block size, from its events (null until the first BlockStored). */
  blockSize: number | null;
  mirror: MirrorStats;
  /** Events of offload tiers (CPU, disk) so far: counted, not mirrored (a block on the host is not a prefix-cache hit). */
  offloadEvents: number;
}

/** Told, in order, what the engine's cache holds: keys held and dropped, clears, and the connection's state. */
export interface CacheKeySink {
  keyHeld(key: ContentKey): void;
  keyDropped(key: ContentKey): void;
  /** The engine holds nothing known: AllBlocksCleared, or the view was lost (a resync). */
  cleared(): void;
  batchApplied(batch: AppliedBatch): void;
  connected(): void;
  disconnected(): void;
  caughtUp(): void;
}

export class EngineCacheFeed implements KvEventConsumer {
  private readonly mirror: EngineCacheMirror;
  private offloadEvents = 0;

  constructor(private readonly sink: CacheKeySink) {
    this.mirror = new EngineCacheMirror({ held: (key) => sink.keyHeld(key), dropped: (key) => sink.keyDropped(key) });
  }

  batch(batch: KvEventBatchIn): void {
    for (const event of batch.events) {
      if (event.type === "AllBlocksCleared") {
        this.clear();
        continue;
      }
      if (event.medium !== null && event.medium !== "GPU") {
        this.offloadEvents++;
        continue;
      }
      if (event.type === "BlockStored") this.mirror.stored(event);
      else this.mirror.removed(event.hashes);
    }
    this.sink.batchApplied({ ts: batch.ts, replayed: batch.replayed, blockSize: this.mirror.blockSize, mirror: this.mirror.stats, offloadEvents: this.offloadEvents });
  }

  resync(): void {
    this.clear();
  }

  connected(): void {
    this.sink.connected();
  }

  disconnected(): void {
    this.sink.disconnected();
  }

  caughtUp(): void {
    this.sink.caughtUp();
  }

  private clear(): void {
    this.mirror.cleared();
    this.sink.cleared();
  }
}
