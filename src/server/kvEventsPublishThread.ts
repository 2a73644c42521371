/**
 * `--kv-events-publish` off the request thread (issue 27). With the sockets on the request thread,
 * a client opening 19,990 idle connections to the PUB port made that thread accept, refuse and
 * time out every one of them, and /healthz stalled for up to 167 ms. One Bun Worker
 * (kvEventsPublishWorker.ts) now owns the PUB and replay ROUTER sockets (a KvEventPublisher);
 * the request thread only gathers the engine's events into batches, encodes each (one msgpack
 * message, as before) and hands its bytes over (transferred, not copied).
 *
 * If the thread dies, the failure is logged and a new one binds the same ports a second later,
 * numbering on from where the sequence was: the batches published meanwhile are lost, and
 * subscribers see the gap (their replay cannot fill it: the replay buffer went with the thread).
 */
import { encodeKvEventBatch } from "../kv/kvEventBatch.ts";
import type { KvCacheGroupTag, PrefixCacheEvents, StoredPrefixBlock } from "../kv/prefixBlockCache.ts";
import { parseTcpEndpoint } from "../zmq/tcpEndpoint.ts";
import { insideSingleBinary, KV_EVENTS_PUBLISH_WORKER_ENTRY } from "../workerEntries.ts";
import { sleep } from "../runtime/sleep.ts";
import { startModuleWorker, unrefWorker } from "../runtime/workers.ts";
import { KvEventBatcher } from "./kvEventBatcher.ts";
import type { KvEventsPublishOptions } from "./kvEventPublisher.ts";
import type { KvEventPublisherStats } from "./kvEventPublisherMetrics.ts";
import { kvEventPublisherMetrics } from "./kvEventPublisherMetrics.ts";
import type { KvEventsPublishThreadIn, KvEventsPublishThreadOut } from "./kvEventsPublishThreadMessages.ts";

const RESTART_AFTER_MS = 1000;
/** A thread that cannot bind its ports again is retried, waiting twice as long each time up to this. */
const MAX_RESTART_AFTER_MS = 30_000;
/** Starting the thread and binding the sockets. */
const OPEN_LIMIT_MS = 30_000;
/** The sockets' close lets peers read what is queued for up to a second. */
const CLOSE_WAIT_MS = 3000;
/** /metrics asks the thread for its counters; past this it answers with the last ones it sent. */
const STATS_WAIT_MS = 1000;

const NO_STATS: KvEventPublisherStats = { batches: 0, events: 0, subscribers: 0, replayRequests: 0, dropped: 0, refusedConnections: 0, handshakeTimeouts: 0, replayBufferBatches: 0, replayBufferBytes: 0 };

/** The worker's entry: in the single binary a worker is named by the path given to `bun build`. */
function workerEntry(): string {
  return insideSingleBinary() ? KV_EVENTS_PUBLISH_WORKER_ENTRY : new URL("./kvEventsPublishWorker.ts", import.meta.url).href;
}

/** A batch's bytes in an ArrayBuffer of their own, so that transferring it takes nothing else along (small Buffers share a pool). */
function ownBuffer(payload: Uint8Array): Uint8Array {
  if (payload.byteOffset === 0 && payload.byteLength === payload.buffer.byteLength && payload.buffer instanceof ArrayBuffer) return payload;
  const owned = new Uint8Array(payload.byteLength);
  owned.set(payload);
  return owned;
}

export class KvEventsPublishThread implements PrefixCacheEvents {
  private worker: Worker | null = null;
  /** Whether the thread has its sockets bound (batches before that, or after it died, are lost). */
  private ready = false;
  private readonly batcher: KvEventBatcher;
  /** The next batch's sequence number (counting the batches lost while the thread was down). */
  private nextSequence = 0;
  /** The sequence number the running thread started from. */
  private threadFirstSequence = 0;
  private lastStats: KvEventPublisherStats = NO_STATS;
  private readonly statsWaiters = new Map<number, (stats: KvEventPublisherStats) => void>();
  private nextStatsId = 1;
  private restartTimer: ReturnType<typeof setTimeout> | null = null;
  private restartAfterMs = RESTART_AFTER_MS;
  private whenReady: { resolve(): void; reject(error: Error): void } | null = null;
  private whenClosed: (() => void) | null = null;
  private closed = false;
  /** The bound endpoints (the actual port when 0 was asked for). */
  endpoint = "";
  replayEndpoint: string | null = null;
  /** Threads started again after one died. */
  restarts = 0;

  private constructor(
    private options: KvEventsPublishOptions,
    private readonly log: (text: string) => void,
  ) {
    this.batcher = new KvEventBatcher(options.hashes, (events) => this.publish(encodeKvEventBatch(Date.now() / 1000, events, { layout: options.layout })));
  }

  /** Starts the thread and binds the sockets; rejects with the system's error when an endpoint cannot be bound. */
  static async open(options: KvEventsPublishOptions, log: (text: string) => void = () => {}): Promise<KvEventsPublishThread> {
    const thread = new KvEventsPublishThread(options, log);
    await thread.start();
    return thread;
  }

  stored(blocks: readonly StoredPrefixBlock[]): void {
    this.batcher.stored(blocks);
  }

  removed(hashes: readonly string[], group?: KvCacheGroupTag): void {
    this.batcher.removed(hashes, group);
  }

  cleared(): void {
    this.batcher.cleared();
  }

  /** The counters as the thread last sent them (batches and events as counted here). */
  get stats(): KvEventPublisherStats {
    return this.withOwnCounts(this.lastStats);
  }

  /** The thread's counters now (after every batch handed to it so far); the last ones sent if it does not answer in time. */
  freshStats(): Promise<KvEventPublisherStats> {
    if (this.worker === null || !this.ready || this.closed) return Promise.resolve(this.stats);
    const id = this.nextStatsId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.statsWaiters.delete(id);
        resolve(this.stats);
      }, STATS_WAIT_MS);
      this.statsWaiters.set(id, (stats) => {
        clearTimeout(timer);
        resolve(this.withOwnCounts(stats));
      });
      this.send({ kind: "stats", id });
    });
  }

  /** Prometheus text for /metrics. */
  async metrics(): Promise<string> {
    return kvEventPublisherMetrics(await this.freshStats());
  }

  /** Publishes what is pending, closes both sockets and ends the thread. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.batcher.stop();
    this.closed = true;
    if (this.restartTimer !== null) clearTimeout(this.restartTimer);
    this.answerStatsWaiters();
    const worker = this.worker;
    if (worker === null) return;
    if (this.ready) {
      const closed = new Promise<void>((resolve) => (this.whenClosed = resolve));
      this.send({ kind: "close" });
      await Promise.race([closed, sleep(CLOSE_WAIT_MS)]);
    }
    worker.terminate();
    this.worker = null;
  }

  private withOwnCounts(stats: KvEventPublisherStats): KvEventPublisherStats {
    return { ...stats, batches: this.nextSequence, events: this.batcher.events };
  }

  private publish(payload: Uint8Array): void {
    this.nextSequence++;
    if (this.worker === null || !this.ready) return;
    const owned = ownBuffer(payload);
    this.worker.postMessage({ kind: "publish", payload: owned } satisfies KvEventsPublishThreadIn, [owned.buffer as ArrayBuffer]);
  }

  /** Starts a thread and has it bind the sockets; resolves once they are bound. */
  private start(): Promise<void> {
    const worker = startModuleWorker(workerEntry());
    this.worker = worker;
    this.ready = false;
    worker.addEventListener("message", (event: MessageEvent<KvEventsPublishThreadOut>) => this.received(worker, event.data));
    worker.addEventListener("error", (event) => this.failed(worker, (event as ErrorEvent).message ?? String(event)));
    worker.addEventListener("close", () => this.failed(worker, "the thread exited"));
    unrefWorker(worker);
    const ready = new Promise<void>((resolve, reject) => (this.whenReady = { resolve, reject }));
    const limit = setTimeout(() => this.failed(worker, `its sockets were not bound within ${OPEN_LIMIT_MS / 1000} s`), OPEN_LIMIT_MS);
    this.threadFirstSequence = this.nextSequence;
    this.send({ kind: "open", options: this.options, firstSequence: this.nextSequence });
    return ready.finally(() => clearTimeout(limit));
  }

  private received(worker: Worker, message: KvEventsPublishThreadOut): void {
    if (worker !== this.worker) return;
    switch (message.kind) {
      case "ready":
        this.ready = true;
        this.restartAfterMs = RESTART_AFTER_MS;
        this.lastStats = message.stats;
        if (this.restarts > 0) this.log(`ctxr serve: the KV events publisher thread is back on ${message.endpoint}; sequence numbers go on from ${this.threadFirstSequence}\n`);
        this.bound(message.endpoint, message.replayEndpoint);
        this.whenReady?.resolve();
        this.whenReady = null;
        return;
      case "failed":
        return this.failed(worker, message.message, true);
      case "stats": {
        this.lastStats = message.stats;
        if (message.id === null) return;
        const waiter = this.statsWaiters.get(message.id);
        this.statsWaiters.delete(message.id);
        return waiter?.(message.stats);
      }
      case "log":
        return this.log(message.text);
      case "closed":
        return this.whenClosed?.();
    }
  }

  /** Records the bound endpoints; a thread started again binds exactly these ports. */
  private bound(endpoint: string, replayEndpoint: string | null): void {
    this.endpoint = endpoint;
    this.replayEndpoint = replayEndpoint;
    this.options = { ...this.options, endpoint: parseTcpEndpoint(endpoint), replay: replayEndpoint === null ? null : parseTcpEndpoint(replayEndpoint) };
  }

  private failed(worker: Worker, why: string, bindFailed = false): void {
    if (this.closed || this.worker !== worker) return;
    this.worker = null;
    this.ready = false;
    worker.terminate();
    this.answerStatsWaiters();
    this.whenReady?.reject(new Error(why));
    this.whenReady = null;
    // Not bound even once: open() rejects, and the caller (ctxr serve) reports it.
    if (this.endpoint === "") return;
    const after = this.restartAfterMs;
    this.restartAfterMs = Math.min(2 * after, MAX_RESTART_AFTER_MS);
    this.log(`ctxr serve: the KV events publisher thread ${bindFailed ? "could not bind its sockets" : "failed"} (${why}); KV event batches are lost until it restarts in ${after / 1000} s\n`);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (this.closed) return;
      this.restarts++;
      this.start().catch(() => {});
    }, after);
  }

  private answerStatsWaiters(): void {
    for (const waiter of this.statsWaiters.values()) waiter(this.lastStats);
    this.statsWaiters.clear();
  }

  private send(message: KvEventsPublishThreadIn): void {
    this.worker!.postMessage(message);
  }
}
