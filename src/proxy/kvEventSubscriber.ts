/**
 * KV events in (`ctxr serve --upstream URL --kv-events tcp://HOST:PORT[,replay=…]`, issue 13): a
 * subscriber to one engine's ZeroMQ KV-event publisher (vLLM, SGLang, ctxr serve --model), which
 * hands a consumer each batch of decoded, normalized events in sequence order, and tells it when
 * its view of the engine's cache must be dropped.
 *
 * - a SUB socket connects to the publisher (and keeps reconnecting) and gets [topic, sequence
 *   number (8 bytes, big-endian), msgpack payload] messages (kvEventDecoding.ts decodes them);
 * - a DEALER socket asks the replay endpoint for missed batches: [empty delimiter, first sequence
 *   number] (vLLM's and SGLang's ROUTER accept only that framing), answered by [empty, seq,
 *   payload] messages and an end marker of seq −1;
 * - kvEventSequencer.ts decides what to apply, wait for, replay or give up (resync).
 *
 * Nothing a publisher sends can stop it: malformed messages are counted by kind and logged once
 * per kind, a replay that does not answer is given up after `replayTimeoutMs` of silence, and a
 * consumer that throws is logged (once) and kept.
 */
import { decodeKvEventBatch, DEFAULT_KV_EVENT_DECODE_LIMITS, KvEventDecodeError, type DecodedKvEventBatch, type KvEventDecodeLimits } from "../kv/kvEventDecoding.ts";
import { formatTcpEndpoint, parseConnectEndpoint, splitEndpointSettings, type TcpEndpoint } from "../zmq/tcpEndpoint.ts";
import { DealerSocket, SubSocket, type ConnectingSocketOptions } from "../zmq/zmqConnectingSockets.ts";
import { KvEventSequencer, type KvEventResyncReason } from "./kvEventSequencer.ts";

export type { KvEventResyncReason } from "./kvEventSequencer.ts";

type ConnectEndpoint = TcpEndpoint & { host: string };

export interface KvEventsSubscribeOptions {
  endpoint: ConnectEndpoint;
  replay: ConnectEndpoint | null;
  /** Subscribe to messages whose topic starts with this (default "": all). */
  topic: string;
}

/** `tcp://HOST:PORT[,replay=tcp://HOST:PORT][,topic=T]`, or `none` (null); RangeError naming what is wrong. */
export function parseKvEventsSubscribe(value: string): KvEventsSubscribeOptions | null {
  if (value.trim() === "none") return null;
  const { endpoint, settings } = splitEndpointSettings(value, ["replay", "topic"]);
  const replay = settings.get("replay");
  return { endpoint: parseConnectEndpoint(endpoint), replay: replay === undefined ? null : parseConnectEndpoint(replay), topic: settings.get("topic") ?? "" };
}

/** A batch as the consumer gets it. */
export interface KvEventBatchIn extends DecodedKvEventBatch {
  /** Unsigned 64-bit. */
  seq: bigint;
  /** It came through the replay socket (old news: its ts says when it happened). */
  replayed: boolean;
}

/**
 * What a subscriber tells. Batches come in sequence order; apply each one's events in order.
 * After `resync`, the view built from earlier batches is wrong (events were lost, the engine
 * restarted, the connection dropped): drop it, as for AllBlocksCleared; later batches rebuild it.
 */
export interface KvEventConsumer {
  batch(batch: KvEventBatchIn): void;
  resync(reason: KvEventResyncReason): void;
  /** The SUB socket is through a handshake with the publisher (after the resync, on a reconnect). */
  connected?(): void;
  /** The SUB socket lost its connection (it reconnects; a resync follows once it has). */
  disconnected?(): void;
  /** Batches from..to had been missed and came back through replay: the view is exact again. */
  gapRecovered?(from: bigint, to: bigint): void;
  /**
   * After a connection, the view has caught up with the engine's: the replay of its buffer ended
   * (or failed, or there is no replay socket): what the engine holds now is all the view lacks.
   */
  caughtUp?(): void;
}

/** `oversized`: over the payload size limit (skipped unread); `limits`: over a decode limit (events, values, depth: checked before decoding). */
export type MalformedKind = "frames" | "sequence" | "oversized" | "limits" | "msgpack" | "batch" | "event" | "replay";

/** A payload's size limit by default (--kv-events-max-bytes). */
export const DEFAULT_KV_EVENT_MAX_BYTES = 16 * 1024 * 1024;

export interface KvEventSubscriberSettings {
  /** How long a gap waits for its batches to come late before asking the replay socket (default 50 ms). */
  gapWaitMs?: number;
  /** A replay with no answer for this long is given up (default 3000 ms). */
  replayTimeoutMs?: number;
  /** Messages with a larger frame are skipped unread, counted as oversized (default DEFAULT_KV_EVENT_MAX_BYTES). */
  maxMessageBytes?: number;
  /** What a payload may hold once decoded (default DEFAULT_KV_EVENT_DECODE_LIMITS); over it, it is counted (limits) and dropped undecoded. */
  decodeLimits?: Partial<KvEventDecodeLimits>;
  /** Payload bytes held while a gap waits for its batches (default the sequencer's, 64 MiB). */
  maxPendingBytes?: number;
  /** Where the first malformed message of each kind (and the first consumer error) is reported. */
  log?: (text: string) => void;
  /** Clock in ms (event lag), replaceable in tests. */
  now?: () => number;
  /** Reconnect and heartbeat timing of both sockets. */
  sockets?: ConnectingSocketOptions;
}

export interface KvEventSubscriberStats {
  endpoint: string;
  replayEndpoint: string | null;
  connected: boolean;
  /** Handshakes with the publisher (the first connection and every reconnect). */
  connections: number;
  /** Batches applied (live and replayed) and the events in them. */
  batches: number;
  events: number;
  replayedBatches: number;
  /** Gaps in the sequence seen, replay requests sent, and gaps replay filled. */
  gaps: number;
  replays: number;
  recoveredGaps: number;
  resyncs: number;
  resyncReasons: Partial<Record<KvEventResyncReason, number>>;
  /** Late copies of applied batches, ignored. */
  duplicates: number;
  malformed: Partial<Record<MalformedKind, number>>;
  /** Events of types it does not know, skipped. */
  unknownEvents: number;
  /** A number, or a decimal string past 2^53 (sequence numbers are unsigned 64-bit). */
  lastSeq: number | string | null;
  /** Now minus the last live batch's ts, when it was applied (ms; null before the first). */
  lastEventLagMs: number | null;
  /** The payload layout last seen. */
  layout: DecodedKvEventBatch["layout"] | null;
}

const EMPTY = new Uint8Array(0);
const MAX_SEQ = (1n << 64n) - 1n;
/** Stands for a payload that was over the size limit (skipped unread). */
const OVERSIZED_PAYLOAD = new Uint8Array(0);
/** The replay's end marker: −1 as a signed 8-byte number (vLLM's), all ones. */
const END_OF_REPLAY = MAX_SEQ;

/** Reads an 8-byte big-endian unsigned sequence number; null when the frame is not one. */
function sequenceNumber(frame: Uint8Array): bigint | null {
  if (frame.length !== 8) return null;
  return new DataView(frame.buffer, frame.byteOffset, 8).getBigUint64(0, false);
}

function sequenceBytes(seq: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, seq, false);
  return out;
}

/** A sequence number as JSON can carry it exactly. */
function seqForJson(seq: bigint): number | string {
  return seq <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(seq) : seq.toString();
}

export class KvEventSubscriber {
  private consumer: KvEventConsumer | null = null;
  private sub: SubSocket | null = null;
  private dealer: DealerSocket | null = null;
  private readonly sequencer: KvEventSequencer;
  private gapTimer: ReturnType<typeof setTimeout> | null = null;
  private replayTimer: ReturnType<typeof setTimeout> | null = null;
  /** The replay request waiting for the DEALER to connect. */
  private unsentReplay: bigint | null = null;
  private replayInFlight = false;
  private readonly logged = new Set<string>();
  private closed = false;
  private readonly settings: Required<Omit<KvEventSubscriberSettings, "sockets" | "decodeLimits" | "maxPendingBytes">> & { sockets: ConnectingSocketOptions; decodeLimits: KvEventDecodeLimits };
  private readonly counters = {
    batches: 0,
    events: 0,
    replayedBatches: 0,
    gaps: 0,
    replays: 0,
    recoveredGaps: 0,
    resyncs: 0,
    duplicates: 0,
    unknownEvents: 0,
  };
  private readonly resyncReasons: Partial<Record<KvEventResyncReason, number>> = {};
  private readonly malformed: Partial<Record<MalformedKind, number>> = {};
  private lastSeq: bigint | null = null;
  private lastEventLagMs: number | null = null;
  private layout: DecodedKvEventBatch["layout"] | null = null;

  constructor(
    readonly options: KvEventsSubscribeOptions,
    settings: KvEventSubscriberSettings = {},
  ) {
    this.settings = {
      gapWaitMs: settings.gapWaitMs ?? 50,
      replayTimeoutMs: settings.replayTimeoutMs ?? 3000,
      maxMessageBytes: settings.maxMessageBytes ?? DEFAULT_KV_EVENT_MAX_BYTES,
      decodeLimits: { ...DEFAULT_KV_EVENT_DECODE_LIMITS, ...settings.decodeLimits },
      log: settings.log ?? ((text) => void process.stderr.write(text)),
      now: settings.now ?? Date.now,
      sockets: settings.sockets ?? {},
    };
    this.sequencer = new KvEventSequencer(
      {
        apply: (seq, payload, replayed) => this.apply(seq, payload, replayed),
        resync: (reason) => {
          this.counters.resyncs++;
          this.resyncReasons[reason] = (this.resyncReasons[reason] ?? 0) + 1;
          this.tell((c) => c.resync(reason));
        },
        gapSeen: () => this.gapSeen(),
        requestReplay: (from) => this.requestReplay(from),
        cancelReplay: () => this.stopReplay(),
        gapRecovered: (from, to) => {
          this.counters.recoveredGaps++;
          this.tell((c) => c.gapRecovered?.(from, to));
        },
        duplicate: () => this.counters.duplicates++,
      },
      { replay: options.replay !== null, ...(settings.maxPendingBytes === undefined ? {} : { maxPendingBytes: settings.maxPendingBytes }) },
    );
  }

  get endpoint(): string {
    return formatTcpEndpoint(this.options.endpoint.host, this.options.endpoint.port);
  }

  get replayEndpoint(): string | null {
    return this.options.replay === null ? null : formatTcpEndpoint(this.options.replay.host, this.options.replay.port);
  }

  /** Connects (and keeps reconnecting) and hands `consumer` what arrives. */
  start(consumer: KvEventConsumer): void {
    if (this.consumer !== null) throw new Error("KvEventSubscriber.start: already started");
    this.consumer = consumer;
    this.sub = new SubSocket(
      this.options.endpoint,
      [new TextEncoder().encode(this.options.topic)],
      {
        message: (frames, oversized) => this.live(frames, oversized),
        connected: () => {
          this.sequencer.connected();
          this.tell((c) => c.connected?.());
          if (this.options.replay === null) this.tell((c) => c.caughtUp?.());
        },
        disconnected: () => this.tell((c) => c.disconnected?.()),
      },
      { ...this.settings.sockets, maxFrameBytes: this.settings.maxMessageBytes },
    );
    this.sub.start();
  }

  get stats(): KvEventSubscriberStats {
    return {
      endpoint: this.endpoint,
      replayEndpoint: this.replayEndpoint,
      connected: this.sub?.connected ?? false,
      connections: this.sub?.connections ?? 0,
      ...this.counters,
      resyncReasons: { ...this.resyncReasons },
      malformed: { ...this.malformed },
      lastSeq: this.lastSeq === null ? null : seqForJson(this.lastSeq),
      lastEventLagMs: this.lastEventLagMs,
      layout: this.layout,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.gapTimer !== null) clearTimeout(this.gapTimer);
    this.gapTimer = null;
    await Promise.all([this.sub?.close(), this.stopReplay()]);
  }

  private live(frames: Uint8Array[], oversized: boolean): void {
    if (this.closed) return;
    if (frames.length !== 3) return this.reject("frames", `a message of ${frames.length} frames (expected topic, sequence number, payload)`);
    const seq = sequenceNumber(frames[1]!);
    if (seq === null) return this.reject("sequence", `the sequence number frame is not 8 bytes of an unsigned number`);
    this.sequencer.live(seq, oversized ? OVERSIZED_PAYLOAD : frames[2]!);
  }

  private apply(seq: bigint, payload: Uint8Array, replayed: boolean): void {
    this.lastSeq = seq;
    if (payload === OVERSIZED_PAYLOAD) return this.unusable(seq, "oversized", `over the ${this.settings.maxMessageBytes}-byte limit`);
    let batch: DecodedKvEventBatch;
    try {
      batch = decodeKvEventBatch(payload, this.settings.decodeLimits);
    } catch (error) {
      return this.unusable(seq, error instanceof KvEventDecodeError ? error.kind : "batch", (error as Error).message);
    }
    this.counters.batches++;
    this.counters.events += batch.events.length;
    if (replayed) this.counters.replayedBatches++;
    else this.lastEventLagMs = this.settings.now() - batch.ts * 1000;
    this.layout = batch.layout;
    for (const type of batch.unknownTypes) {
      this.counters.unknownEvents++;
      this.once(`type:${type}`, `events of type ${JSON.stringify(type)} are not known and are skipped`);
    }
    const delivered: KvEventBatchIn = Object.assign(batch, { seq, replayed });
    this.tell((c) => c.batch(delivered));
  }

  /** A batch in the sequence that cannot be used: the view missed its events. */
  private unusable(seq: bigint, kind: MalformedKind, detail: string): void {
    this.reject(kind, `batch ${seq}: ${detail}`);
    this.sequencer.unusable();
  }

  private gapSeen(): void {
    this.counters.gaps++;
    if (this.gapTimer !== null) clearTimeout(this.gapTimer);
    this.gapTimer = setTimeout(() => {
      this.gapTimer = null;
      if (!this.closed) this.sequencer.gapTimeout();
    }, this.settings.gapWaitMs);
  }

  private requestReplay(from: bigint): void {
    if (this.closed || this.options.replay === null) return;
    this.counters.replays++;
    this.replayInFlight = true;
    this.dealer ??= this.openDealer(this.options.replay);
    this.unsentReplay = from;
    this.sendReplay();
    this.armReplayTimer();
  }

  private openDealer(endpoint: ConnectEndpoint): DealerSocket {
    const dealer = new DealerSocket(
      endpoint,
      {
        message: (frames, oversized) => this.replayAnswer(frames, oversized),
        connected: () => this.sendReplay(),
        // Answers on a lost connection are lost with it.
        disconnected: () => {
          if (this.replayInFlight && this.unsentReplay === null) this.failReplay();
        },
      },
      { ...this.settings.sockets, maxFrameBytes: this.settings.maxMessageBytes },
    );
    dealer.start();
    return dealer;
  }

  private sendReplay(): void {
    if (this.unsentReplay === null || this.dealer === null) return;
    if (this.dealer.send([EMPTY, sequenceBytes(this.unsentReplay)])) this.unsentReplay = null;
  }

  private replayAnswer(frames: Uint8Array[], oversized: boolean): void {
    if (!this.replayInFlight) return;
    this.armReplayTimer();
    // [empty delimiter, seq, payload] as vLLM's ROUTER answers, or [seq, payload].
    const parts = frames.length === 3 && frames[0]!.length === 0 ? frames.slice(1) : frames;
    const seq = parts.length === 2 ? sequenceNumber(parts[0]!) : null;
    if (seq === null) {
      this.reject("replay", `a replay answer of ${frames.length} frames that is not [seq, payload]`);
      return this.failReplay();
    }
    if (seq === END_OF_REPLAY) {
      this.replayInFlight = false;
      this.clearReplayTimer();
      this.sequencer.replayEnded();
      this.tell((c) => c.caughtUp?.());
      return;
    }
    this.sequencer.replayed(seq, oversized ? OVERSIZED_PAYLOAD : parts[1]!);
  }

  private armReplayTimer(): void {
    this.clearReplayTimer();
    this.replayTimer = setTimeout(() => this.failReplay(), this.settings.replayTimeoutMs);
  }

  private clearReplayTimer(): void {
    if (this.replayTimer !== null) clearTimeout(this.replayTimer);
    this.replayTimer = null;
  }

  private failReplay(): void {
    if (!this.replayInFlight) return;
    void this.stopReplay();
    if (this.closed) return;
    this.sequencer.replayFailed();
    this.tell((c) => c.caughtUp?.());
  }

  /** Ends the replay in flight; the DEALER is closed so that none of its answers can arrive late. */
  private async stopReplay(): Promise<void> {
    this.replayInFlight = false;
    this.unsentReplay = null;
    this.clearReplayTimer();
    const dealer = this.dealer;
    this.dealer = null;
    await dealer?.close();
  }

  private reject(kind: MalformedKind, detail: string): void {
    this.malformed[kind] = (this.malformed[kind] ?? 0) + 1;
    this.once(`malformed:${kind}`, `malformed (${kind}): ${detail}; further ones of this kind are counted, not logged`);
  }

  private tell(call: (consumer: KvEventConsumer) => void): void {
    if (this.consumer === null) return;
    try {
      call(this.consumer);
    } catch (error) {
      this.once("consumer", `the consumer failed: ${(error as Error).stack ?? String(error)}`);
    }
  }

  private once(key: string, message: string): void {
    if (this.logged.has(key)) return;
    this.logged.add(key);
    this.settings.log(`ctxr serve: KV events from ${this.endpoint}: ${message}\n`);
  }
}
