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
import type { KvEvent } from "../kv/kvEventDecoding.ts";

/** Kinds of vLLM KV cache groups whose blocks must all be there for a prefix hit. */
const FULL_ATTENTION_KINDS = new Set(["full_attention", "mla_attention", "sink_full_attention"]);

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
  /** Events of a hybrid model's KV cache groups other than the one followed, so far: counted, not mirrored. */
  otherGroupEvents: number;
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

/**
 * A hybrid model's engine (vLLM with full-attention and sliding-window or Mamba layers) keeps one
 * KV cache group per kind and tells each group's blocks apart by `group_idx`. A sliding-window
 * group frees the blocks that fell out of its window — a chain's first blocks — so its events say
 * nothing about prefix hits, and the same engine hash can name blocks of two groups. The feed
 * follows one group: the first full-attention one it sees (until then, the first group of any
 * kind; switching drops the mirror, as a resync does). Events without a group are always followed.
 */
export class EngineCacheFeed implements KvEventConsumer {
  private readonly mirror: EngineCacheMirror;
  private offloadEvents = 0;
  private otherGroupEvents = 0;
  private followedGroup: { index: number; fullAttention: boolean } | null = null;

  /** `maxMirrorBytes`: the byte budget of the engine-hash map (null: unlimited). */
  constructor(
    private readonly sink: CacheKeySink,
    maxMirrorBytes: number | null = null,
  ) {
    this.mirror = new EngineCacheMirror({ held: (key) => sink.keyHeld(key), dropped: (key) => sink.keyDropped(key) }, maxMirrorBytes);
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
      if (!this.follows(event)) {
        this.otherGroupEvents++;
        continue;
      }
      if (event.type === "BlockStored") this.mirror.stored(event);
      else this.mirror.removed(event.hashes);
    }
    this.sink.batchApplied({ ts: batch.ts, replayed: batch.replayed, blockSize: this.mirror.blockSize, mirror: this.mirror.stats, offloadEvents: this.offloadEvents, otherGroupEvents: this.otherGroupEvents });
  }

  /** The view is lost, and the engine may have been replaced by one of other groups: both are learnt again. */
  resync(): void {
    this.followedGroup = null;
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

  private follows(event: Exclude<KvEvent, { type: "AllBlocksCleared" }>): boolean {
    if (event.groupIdx === null) return true;
    if (event.type === "BlockStored") {
      const fullAttention = event.specKind === undefined || FULL_ATTENTION_KINDS.has(event.specKind);
      if (this.followedGroup === null) this.followedGroup = { index: event.groupIdx, fullAttention };
      else if (fullAttention && !this.followedGroup.fullAttention && event.groupIdx !== this.followedGroup.index) {
        this.followedGroup = { index: event.groupIdx, fullAttention };
        this.clear();
      }
    }
    return event.groupIdx === this.followedGroup?.index;
  }

  private clear(): void {
    this.mirror.cleared();
    this.sink.cleared();
  }
}
