/**
 * KV events out (`ctxr serve --kv-events-publish`, issue 19 item 5): the built-in engine's prefix
 * cache changes published as vLLM does, so a router (ctxr's proxy, NVIDIA Dynamo, llm-d) knows
 * which blocks each engine really holds.
 *
 * - a ZeroMQ PUB socket sends one message per batch: [topic, sequence number (8 bytes,
 *   big-endian, from 0), msgpack payload (kvEventBatch.ts)];
 * - the events of one event-loop turn (an engine step) make one batch;
 * - the last REPLAY_BUFFER_STEPS batches (REPLAY_BUFFER_BYTES of payloads at most) are kept; a ROUTER socket at the replay endpoint answers
 *   a request holding a starting sequence number (8 bytes, big-endian) with every kept batch from
 *   it on, one message [seq, payload] each, then [-1 (8 bytes of 0xff), empty].
 *
 * `ctxr serve` runs one on a thread of its own (kvEventsPublishThread.ts); tests and the fake
 * engine use it in-thread.
 */
import { encodeKvEventBatch, BLOCK_HASH_ENCODINGS, KV_EVENT_LAYOUTS, type BlockHashEncoding, type KvEventLayout } from "../kv/kvEventBatch.ts";
import type { KvCacheGroupTag, PrefixCacheEvents, StoredPrefixBlock } from "../kv/prefixBlockCache.ts";
import { KvEventBatcher } from "./kvEventBatcher.ts";
import { kvEventPublisherMetrics, type KvEventPublisherStats } from "./kvEventPublisherMetrics.ts";
import { parseTcpEndpoint, splitEndpointSettings, type TcpEndpoint } from "../zmq/tcpEndpoint.ts";
import { DEFAULT_HANDSHAKE_TIMEOUT_MS, DEFAULT_MAX_PEERS, PubSocket, RouterSocket } from "../zmq/zmqSockets.ts";

/** Batches kept for replay (vLLM's default buffer_steps). */
export const REPLAY_BUFFER_STEPS = 10_000;
/** Their payload bytes at most: the oldest go first beyond it. */
export const REPLAY_BUFFER_BYTES = 64 * 1024 * 1024;

/** The replay answer's last message carries this sequence number (−1 as 8 big-endian bytes). */
export const END_OF_REPLAY_SEQ = new Uint8Array(8).fill(0xff);

export interface KvEventsPublishOptions {
  endpoint: TcpEndpoint;
  replay: TcpEndpoint | null;
  /** The first frame of every message (vLLM's default: empty). */
  topic: string;
  hashes: BlockHashEncoding;
  /** How batches are laid out (default map, vLLM main's). */
  layout: KvEventLayout;
  /** Connections each socket holds at once (--kv-events-max-connections; default DEFAULT_MAX_PEERS). */
  maxConnections?: number;
  /** A connection not through the ZMTP handshake this long is closed (--kv-events-handshake-timeout; default 5000 ms). */
  handshakeTimeoutMs?: number;
}

/**
 * `tcp://HOST:PORT[,replay=tcp://HOST:PORT][,topic=T][,hashes=bytes|int][,layout=map|array|mixed]`;
 * RangeError naming what is wrong.
 */
export function parseKvEventsPublish(value: string): KvEventsPublishOptions {
  const { endpoint, settings } = splitEndpointSettings(value, ["replay", "topic", "hashes", "layout"]);
  const options: KvEventsPublishOptions = { endpoint: parseTcpEndpoint(endpoint), replay: null, topic: settings.get("topic") ?? "", hashes: "bytes", layout: "map" };
  const replay = settings.get("replay");
  if (replay !== undefined) options.replay = parseTcpEndpoint(replay);
  const hashes = settings.get("hashes");
  if (hashes !== undefined) {
    if (!(BLOCK_HASH_ENCODINGS as readonly string[]).includes(hashes)) throw new RangeError(`hashes= must be ${BLOCK_HASH_ENCODINGS.join(" or ")}, got '${hashes}'`);
    options.hashes = hashes as BlockHashEncoding;
  }
  const layout = settings.get("layout");
  if (layout !== undefined) {
    if (!(KV_EVENT_LAYOUTS as readonly string[]).includes(layout)) throw new RangeError(`layout= must be map, array or mixed, got '${layout}'`);
    options.layout = layout as KvEventLayout;
  }
  if (options.replay !== null && options.replay.port !== 0 && options.replay.port === options.endpoint.port && options.replay.host === options.endpoint.host) {
    throw new RangeError("the replay endpoint must differ from the publish endpoint");
  }
  return options;
}

export interface KvEventPublisherHooks {
  /** The batches' clock, seconds since the epoch (default: the wall clock). */
  now?: () => number;
  /** Every live message on its way to the PUB socket (default: sent as it is). Fault injection in tests: drop, hold back, reorder. */
  transmit?: (frames: Uint8Array[], send: (frames: readonly Uint8Array[]) => void) => void;
  /** The first batch's sequence number (default 0; a publisher thread started again goes on from where the last one was). */
  firstSequence?: number;
}

function sequenceBytes(seq: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(seq), false);
  return out;
}

export class KvEventPublisher implements PrefixCacheEvents {
  private readonly batcher: KvEventBatcher;
  private nextSeq: number;
  private replayCount = 0;
  private replayDropped = 0;
  /** Kept batches, oldest first from `bufferStart` (the array is compacted as the front is dropped). */
  private buffer: { seq: number; payload: Uint8Array }[] = [];
  private bufferStart = 0;
  private bufferBytes = 0;
  private readonly topic: Uint8Array;
  private closed = false;
  /** The bound endpoints (the actual port when 0 was asked for). */
  readonly endpoint: string;
  readonly replayEndpoint: string | null;

  private constructor(
    private readonly options: KvEventsPublishOptions,
    private readonly pub: PubSocket,
    private readonly router: RouterSocket | null,
    private readonly now: () => number,
    private readonly transmit: KvEventPublisherHooks["transmit"],
    firstSequence: number,
  ) {
    this.nextSeq = firstSequence;
    this.batcher = new KvEventBatcher(options.hashes, (events) => this.publishPayload(encodeKvEventBatch(this.now(), events, { layout: this.options.layout })));
    this.topic = new TextEncoder().encode(options.topic);
    this.endpoint = pub.endpoint(options.endpoint);
    this.replayEndpoint = router === null || options.replay === null ? null : router.endpoint(options.replay);
  }

  /** Binds the sockets; rejects with the system's error when an endpoint cannot be bound. */
  static async open(options: KvEventsPublishOptions, hooks: KvEventPublisherHooks = {}): Promise<KvEventPublisher> {
    const limits = { maxPeers: options.maxConnections ?? DEFAULT_MAX_PEERS, handshakeTimeoutMs: options.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS };
    const pub = await PubSocket.bind(options.endpoint, limits);
    let publisher: KvEventPublisher | null = null;
    let router: RouterSocket | null = null;
    try {
      if (options.replay !== null) router = await RouterSocket.bind(options.replay, (identity, frames) => publisher?.replay(identity, frames), limits);
    } catch (error) {
      await pub.close();
      throw error;
    }
    publisher = new KvEventPublisher(options, pub, router, hooks.now ?? (() => Date.now() / 1000), hooks.transmit, hooks.firstSequence ?? 0);
    return publisher;
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

  get stats(): KvEventPublisherStats {
    return {
      batches: this.nextSeq,
      events: this.batcher.events,
      subscribers: this.pub.subscribers,
      replayRequests: this.replayCount,
      dropped: this.pub.dropped + this.replayDropped,
      refusedConnections: this.pub.refusedPeers + (this.router?.refusedPeers ?? 0),
      handshakeTimeouts: this.pub.handshakeTimeouts + (this.router?.handshakeTimeouts ?? 0),
      replayBufferBatches: this.buffer.length - this.bufferStart,
      replayBufferBytes: this.bufferBytes,
    };
  }

  /** Prometheus text for /metrics. */
  metrics(): string {
    return kvEventPublisherMetrics(this.stats);
  }

  /** Publishes the events gathered so far as one batch now. */
  flush(): void {
    if (!this.closed) this.batcher.flush();
  }

  /** Publishes an encoded batch under the next sequence number (kept for replay); returns that number. */
  publishPayload(payload: Uint8Array): number {
    const seq = this.nextSeq++;
    const frames = [this.topic, sequenceBytes(seq), payload];
    if (this.transmit === undefined) this.pub.send(frames);
    else this.transmit(frames, (out) => this.pub.send(out));
    this.keep(seq, payload);
    return seq;
  }

  /** Keeps a batch for replay, dropping the oldest beyond REPLAY_BUFFER_STEPS batches or REPLAY_BUFFER_BYTES. */
  private keep(seq: number, payload: Uint8Array): void {
    this.buffer.push({ seq, payload });
    this.bufferBytes += payload.length;
    while (this.buffer.length - this.bufferStart > REPLAY_BUFFER_STEPS || (this.bufferBytes > REPLAY_BUFFER_BYTES && this.buffer.length - this.bufferStart > 1)) {
      this.bufferBytes -= this.buffer[this.bufferStart]!.payload.length;
      this.buffer[this.bufferStart++] = undefined as never;
    }
    if (this.bufferStart > 1024 && this.bufferStart * 2 > this.buffer.length) {
      this.buffer = this.buffer.slice(this.bufferStart);
      this.bufferStart = 0;
    }
  }

  /** Sends frames to the subscribers as they are, outside the sequence (tools and tests: malformed messages). */
  sendFrames(frames: readonly Uint8Array[]): void {
    this.pub.send(frames);
  }

  /** Starts the sequence again from 0 with nothing kept for replay, as a restarted engine's publisher does (the sockets stay). */
  restartSequence(): void {
    this.batcher.discard();
    this.nextSeq = 0;
    this.buffer = [];
    this.bufferStart = 0;
    this.bufferBytes = 0;
  }

  /** Publishes what is pending, then closes both sockets. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.batcher.stop();
    this.closed = true;
    await Promise.all([this.pub.close(), this.router?.close()]);
  }

  /**
   * A replay request: [start] from a DEALER, or ["", start] from a REQ (or a DEALER that frames
   * like one, as vLLM's example client does); the answers use the same envelope.
   */
  private replay(identity: Uint8Array, frames: Uint8Array[]): void {
    const delimited = frames.length === 2 && frames[0]!.length === 0;
    const start = frames[delimited ? 1 : 0];
    if ((frames.length !== 1 && !delimited) || start === undefined || start.length !== 8) return;
    this.replayCount++;
    const from = new DataView(start.buffer, start.byteOffset, 8).getBigUint64(0, false);
    const head = delimited ? [new Uint8Array(0)] : [];
    for (let i = this.bufferStart; i < this.buffer.length; i++) {
      const { seq, payload } = this.buffer[i]!;
      if (BigInt(seq) >= from && !this.router!.send(identity, [...head, sequenceBytes(seq), payload])) this.replayDropped++;
    }
    if (!this.router!.send(identity, [...head, END_OF_REPLAY_SEQ, new Uint8Array(0)])) this.replayDropped++;
  }
}
