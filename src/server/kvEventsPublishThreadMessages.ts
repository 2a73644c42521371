/** The messages between the request thread (kvEventsPublishThread.ts) and the KV-events publisher thread (kvEventsPublishWorker.ts). */
import type { KvEventsPublishOptions } from "./kvEventPublisher.ts";
import type { KvEventPublisherStats } from "./kvEventPublisherMetrics.ts";

/**
 * `open`: bind the sockets, the first batch numbered `firstSequence`; `publish`: one encoded batch
 * (its buffer transferred), numbered next; `stats`: answer with the counters now, under `id`.
 */
export type KvEventsPublishThreadIn =
  | { kind: "open"; options: KvEventsPublishOptions; firstSequence: number }
  | { kind: "publish"; payload: Uint8Array }
  | { kind: "stats"; id: number }
  | { kind: "close" };

/** `stats` with an id answers a request; without one it is the periodic report. `failed`: the sockets could not be bound. */
export type KvEventsPublishThreadOut =
  | { kind: "ready"; endpoint: string; replayEndpoint: string | null; stats: KvEventPublisherStats }
  | { kind: "failed"; message: string }
  | { kind: "stats"; id: number | null; stats: KvEventPublisherStats }
  | { kind: "log"; text: string }
  | { kind: "closed" };
