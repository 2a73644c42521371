/**
 * KV events off the request thread (issue 13). Decoding an engine's batches and keying their
 * blocks cost about 1 ms of CPU per request's worth of events, and on the request thread that work
 * queued in front of requests. One Bun Worker (kvEventsWorker.ts) now runs every upstream's
 * subscriber and engine-hash map; the request thread keeps only what routing reads (each
 * UpstreamCacheSync's held keys and contexts) and applies each batch's net change of keys.
 *
 * If the thread dies, each mirror is dropped (routing falls back to the estimate), the failure is
 * logged, and a new thread subscribes again a second later.
 */
import { SlicedCacheKeyApplier } from "./cacheKeyDelta.ts";
import type { CacheKeySink } from "./engineCacheFeed.ts";
import { KvEventSubscriber, type KvEventsSubscribeOptions, type KvEventSubscriberStats } from "./kvEventSubscriber.ts";
import { insideSingleBinary, KV_EVENTS_WORKER_ENTRY } from "../workerEntries.ts";
import type { KvEventsFollowLimits, KvEventsThreadIn, KvEventsThreadOut, KvEventsThreadSettings } from "./kvEventsThreadMessages.ts";
import { sleep } from "../runtime/sleep.ts";
import { startModuleWorker, unrefWorker } from "../runtime/workers.ts";

const RESTART_AFTER_MS = 1000;
const CLOSE_WAIT_MS = 2000;

/** The worker's entry: in the single binary a worker is named by the path given to `bun build`. */
function workerEntry(): string {
  return insideSingleBinary() ? KV_EVENTS_WORKER_ENTRY : new URL("./kvEventsWorker.ts", import.meta.url).href;
}

/** One upstream's subscription, as the proxy sees it: started with the sink its events go to. */
export class KvEventsSubscription {
  /** The subscriber's counters, as the thread last sent them. */
  stats: KvEventSubscriberStats;
  sink: CacheKeySink | null = null;
  /** Applies the thread's messages to `sink`, a slice at a time. */
  applier: SlicedCacheKeyApplier | null = null;
  limits: KvEventsFollowLimits = { maxMirrorBytes: null };

  constructor(
    private readonly thread: KvEventsThread,
    readonly id: number,
    readonly options: KvEventsSubscribeOptions,
  ) {
    // A subscriber not started opens nothing: its counters are the ones before any event.
    this.stats = new KvEventSubscriber(options).stats;
  }

  start(sink: CacheKeySink, limits: Partial<KvEventsFollowLimits> = {}): void {
    if (this.sink !== null) throw new Error("KvEventsSubscription.start: already started");
    this.sink = sink;
    this.applier = new SlicedCacheKeyApplier(sink, () => this.thread.applied(this));
    this.limits = { ...this.limits, ...limits };
    this.thread.follow(this);
  }
}

export class KvEventsThread {
  private worker: Worker | null = null;
  private readonly subscriptions: KvEventsSubscription[] = [];
  private restartTimer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private whenClosed: (() => void) | null = null;

  constructor(
    private readonly log: (text: string) => void,
    private readonly settings: KvEventsThreadSettings = {},
  ) {}

  /** A subscription to one upstream's publisher; nothing connects until it is started. */
  subscribe(options: KvEventsSubscribeOptions): KvEventsSubscription {
    const subscription = new KvEventsSubscription(this, this.subscriptions.length, options);
    this.subscriptions.push(subscription);
    return subscription;
  }

  /** @internal (KvEventsSubscription's applier): a batch message is applied, the thread may send the next. */
  applied(subscription: KvEventsSubscription): void {
    if (this.worker !== null && !this.closed) this.send({ kind: "applied", id: subscription.id });
  }

  /** @internal (KvEventsSubscription.start) */
  follow(subscription: KvEventsSubscription): void {
    if (this.closed || this.restartTimer !== null) return;
    if (this.worker === null) this.open();
    else this.send({ kind: "follow", id: subscription.id, options: subscription.options, settings: this.settings, limits: subscription.limits });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.restartTimer !== null) clearTimeout(this.restartTimer);
    const worker = this.worker;
    if (worker === null) return;
    const closed = new Promise<void>((resolve) => (this.whenClosed = resolve));
    this.send({ kind: "close" });
    await Promise.race([closed, sleep(CLOSE_WAIT_MS)]);
    worker.terminate();
    this.worker = null;
  }

  private open(): void {
    const worker = startModuleWorker(workerEntry());
    this.worker = worker;
    worker.addEventListener("message", (event: MessageEvent<KvEventsThreadOut>) => this.received(event.data));
    worker.addEventListener("error", (event) => this.failed(worker, (event as ErrorEvent).message ?? String(event)));
    worker.addEventListener("close", () => this.failed(worker, "the thread exited"));
    unrefWorker(worker);
    for (const subscription of this.subscriptions) {
      if (subscription.sink !== null) this.send({ kind: "follow", id: subscription.id, options: subscription.options, settings: this.settings, limits: subscription.limits });
    }
  }

  private received(message: KvEventsThreadOut): void {
    switch (message.kind) {
      case "cache": {
        const subscription = this.subscriptions[message.id]!;
        subscription.stats = message.stats;
        subscription.applier!.push(message.message);
        return;
      }
      case "stats":
        this.subscriptions[message.id]!.stats = message.stats;
        return;
      case "log":
        return this.log(message.text);
      case "closed":
        return this.whenClosed?.();
    }
  }

  private failed(worker: Worker, why: string): void {
    if (this.closed || this.worker !== worker) return;
    this.worker = null;
    worker.terminate();
    this.log(`ctxr serve: the KV events thread failed (${why}); the engines' cache mirrors are dropped and it restarts in ${RESTART_AFTER_MS / 1000} s\n`);
    for (const subscription of this.subscriptions) {
      subscription.stats = { ...subscription.stats, connected: false };
      subscription.applier?.reset();
      subscription.sink?.disconnected();
      subscription.sink?.cleared();
    }
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (!this.closed) this.open();
    }, RESTART_AFTER_MS);
  }

  private send(message: KvEventsThreadIn): void {
    this.worker!.postMessage(message);
  }
}
