/**
 * The KV-events thread's entry (a Bun Worker started by kvEventsThread.ts): every upstream's
 * KvEventSubscriber (ZeroMQ sockets, msgpack decoding) and EngineCacheFeed (content keys) run here,
 * and only each batch's net change of held keys goes to the request thread, as CacheKeyMessages.
 */
import { CacheKeyDeltaSink } from "./cacheKeyDelta.ts";
import { EngineCacheFeed } from "./engineCacheFeed.ts";
import { KvEventSubscriber } from "./kvEventSubscriber.ts";
import type { KvEventsThreadIn, KvEventsThreadOut } from "./kvEventsThreadMessages.ts";

declare const self: Worker;

/** How often each subscriber's counters go to the request thread when nothing else does. */
const STATS_EVERY_MS = 500;
/** Batches of this long go to the request thread as one message (a flood of batches costs it at most one message per period). */
const COALESCE_MS = 10;

const subscribers = new Map<number, KvEventSubscriber>();
const sinks = new Map<number, CacheKeyDeltaSink>();

function send(message: KvEventsThreadOut): void {
  const transfer = message.kind === "cache" && message.message.kind === "batch" ? [message.message.held.buffer as ArrayBuffer, message.message.dropped.buffer as ArrayBuffer] : [];
  self.postMessage(message, transfer);
}

self.onmessage = async (event: MessageEvent<KvEventsThreadIn>) => {
  const command = event.data;
  if (command.kind === "follow") {
    const subscriber = new KvEventSubscriber(command.options, { ...command.settings, log: (text) => send({ kind: "log", text }) });
    subscribers.set(command.id, subscriber);
    const sink = new CacheKeyDeltaSink((message) => send({ kind: "cache", id: command.id, message, stats: subscriber.stats }), COALESCE_MS, true);
    sinks.set(command.id, sink);
    subscriber.start(new EngineCacheFeed(sink, command.limits.maxMirrorBytes));
    return;
  }
  if (command.kind === "applied") return sinks.get(command.id)?.applied();
  await Promise.all([...subscribers.values()].map((subscriber) => subscriber.close()));
  subscribers.clear();
  clearInterval(statsTimer);
  send({ kind: "closed" });
};

const statsTimer = setInterval(() => {
  for (const [id, subscriber] of subscribers) send({ kind: "stats", id, stats: subscriber.stats });
}, STATS_EVERY_MS);
