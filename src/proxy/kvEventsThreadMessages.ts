/** The messages between the request thread (kvEventsThread.ts) and the KV-events thread (kvEventsWorker.ts). */
import type { CacheKeyMessage } from "./cacheKeyDelta.ts";
import type { KvEventsSubscribeOptions, KvEventSubscriberSettings, KvEventSubscriberStats } from "./kvEventSubscriber.ts";

/** Settings that can cross threads (no functions: the thread logs through the request thread). */
export type KvEventsThreadSettings = Omit<KvEventSubscriberSettings, "log" | "now">;

/** One subscription's own limits. */
export interface KvEventsFollowLimits {
  /** The byte budget of its engine-hash map (its share of --max-routing-bytes; null: unlimited). */
  maxMirrorBytes: number | null;
}

/** `applied`: the request thread applied a subscription's batch message (the next may come: one is in flight at a time). */
export type KvEventsThreadIn =
  | { kind: "follow"; id: number; options: KvEventsSubscribeOptions; settings: KvEventsThreadSettings; limits: KvEventsFollowLimits }
  | { kind: "applied"; id: number }
  | { kind: "close" };

export type KvEventsThreadOut =
  | { kind: "cache"; id: number; message: CacheKeyMessage; stats: KvEventSubscriberStats }
  | { kind: "stats"; id: number; stats: KvEventSubscriberStats }
  | { kind: "log"; text: string }
  | { kind: "closed" };
