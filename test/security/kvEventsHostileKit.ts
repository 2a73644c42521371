/**
 * Hostile KV-event peers, shared by test/proxy/kvEventsHostile.test.ts,
 * test/server/kvEventPublisherHostile.test.ts and scripts/bench-hostile.ts:
 *
 * - a hostile engine publisher (a ZeroMQ PUB socket in this process) that `ctxr serve --upstream
 *   URL --kv-events tcp://…` follows, and payloads that attack the subscriber: undecodable ones,
 *   oversized ones, a batch of millions of empty maps, floods of BlockStored with random hashes,
 *   sequence numbers past 2^53;
 * - a connection flood against `ctxr serve --kv-events-publish`'s sockets;
 * - a /healthz watcher: the longest answer while a probe runs (the stall).
 *
 * The payloads are built before a probe starts, so this process's own work does not show as the
 * server's stall.
 */
import { randomFillSync } from "node:crypto";
import net from "node:net";
import { join } from "node:path";
import { PubSocket } from "../../src/zmq/zmqSockets.ts";
import { scriptCommand, spawnPiped } from "../../src/runtime/childProcess.ts";
import { sleep } from "../../src/runtime/sleep.ts";

/**
 * Polls /healthz every `everyMs` from a process of its own (healthzWatcher.ts: this process's own
 * work must not count as the server's stall) and keeps the longest answer time (ms) until stopped.
 */
export function watchHealthz(url: string, everyMs = 20): { stop(): Promise<{ maxMs: number; samples: number; failures: number }> } {
  const child = spawnPiped([...scriptCommand(join(import.meta.dirname, "healthzWatcher.ts")), url, String(everyMs)], { env: process.env });
  return {
    async stop() {
      child.stdin.end();
      const text = await new Response(child.stdout).text();
      await child.exited;
      return JSON.parse(text) as { maxMs: number; samples: number; failures: number };
    },
  };
}

function sequenceBytes(seq: bigint): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, seq, false);
  return out;
}

/** A PUB socket on 127.0.0.1 publishing whatever it is given, paced so that nothing is dropped. */
export class HostilePublisher {
  private constructor(readonly pub: PubSocket) {}

  static async open(): Promise<HostilePublisher> {
    return new HostilePublisher(await PubSocket.bind({ host: "127.0.0.1", port: 0 }));
  }

  /** The --kv-events value that follows it. */
  get endpoint(): string {
    return `tcp://127.0.0.1:${this.pub.port}`;
  }

  /** Waits for a subscriber (ctxr's SUB socket) to be subscribed. */
  async subscribed(timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.pub.subscribers === 0) {
      if (Date.now() > deadline) throw new Error("no subscriber connected to the hostile publisher");
      await sleep(10);
    }
  }

  /** Sends [topic "", seq, payload], after the queue to the subscriber has drained below `maxQueuedBytes`. */
  async publish(seq: bigint, payload: Uint8Array, maxQueuedBytes = 16 * 1024 * 1024): Promise<void> {
    while (this.pub.queuedBytes > maxQueuedBytes) await sleep(2);
    const dropped = this.pub.dropped;
    this.pub.send([new Uint8Array(0), sequenceBytes(seq), payload]);
    if (this.pub.dropped !== dropped) throw new Error(`message ${seq} was dropped by the publisher's queue`);
  }

  /** Waits until everything sent has left this process. */
  async drained(): Promise<void> {
    while (this.pub.queuedBytes > 0) await sleep(5);
  }

  close(): Promise<void> {
    return this.pub.close();
  }
}

/** `bytes` bytes that are not msgpack (0xc1 is never used by the format). */
export function undecodablePayload(bytes: number): Uint8Array {
  return new Uint8Array(bytes).fill(0xc1);
}

/** A batch [ts, events, null] whose events are `count` empty maps: 1 byte each on the wire. */
export function emptyMapsPayload(count: number): Uint8Array {
  const out = new Uint8Array(1 + 9 + 5 + count + 1);
  const view = new DataView(out.buffer);
  out[0] = 0x93;
  out[1] = 0xcb;
  view.setFloat64(2, Date.now() / 1000, false);
  out[10] = 0xdd;
  view.setUint32(11, count, false);
  out.fill(0x80, 15, 15 + count);
  out[15 + count] = 0xc0;
  return out;
}

/**
 * A batch (SGLang's array layout) of one BlockStored event: `blocks` blocks of one token each with
 * random 64-bit integer hashes, a chain from a prompt's first block, random tokens (every block's
 * content key is new).
 */
export function randomBlockStoredPayload(blocks: number): Uint8Array {
  const eventHead = [0x97, 0xab, ...new TextEncoder().encode("BlockStored"), 0xdd];
  const size = 1 + 9 + 1 + eventHead.length + 4 + 9 * blocks + 1 + 5 + 5 * blocks + 1 + 1 + 4 + 1;
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  let at = 0;
  out[at++] = 0x93;
  out[at++] = 0xcb;
  view.setFloat64(at, Date.now() / 1000, false);
  at += 8;
  out[at++] = 0x91;
  out.set(eventHead, at);
  at += eventHead.length;
  view.setUint32(at, blocks, false);
  at += 4;
  // node:crypto: the web getRandomValues is limited to 64 KiB a call (Deno enforces it, Bun does not).
  const random = randomFillSync(new Uint32Array(3 * blocks));
  for (let i = 0; i < blocks; i++) {
    out[at++] = 0xcf;
    view.setUint32(at, random[3 * i]!, false);
    view.setUint32(at + 4, random[3 * i + 1]!, false);
    at += 8;
  }
  out[at++] = 0xc0; // parent: none
  out[at++] = 0xdd;
  view.setUint32(at, blocks, false);
  at += 4;
  for (let i = 0; i < blocks; i++) {
    out[at++] = 0xce;
    view.setUint32(at, random[3 * i + 2]! >>> 1, false);
    at += 4;
  }
  out[at++] = 0x01; // block_size
  out[at++] = 0xc0; // lora_id
  out.set([0xa3, 0x47, 0x50, 0x55], at); // medium "GPU"
  at += 4;
  out[at++] = 0xc0; // data_parallel_rank
  if (at !== size) throw new Error(`randomBlockStoredPayload: wrote ${at} of ${size} bytes`);
  return out;
}

/** A valid empty batch [ts, [], null]. */
export function emptyBatchPayload(): Uint8Array {
  return emptyMapsPayload(0);
}

/**
 * Opens `count` TCP connections to 127.0.0.1:`port` that never speak (no ZMTP greeting), 256
 * connects in flight at a time; returns them and a count of those closed (by the server, until
 * the caller destroys them).
 */
export async function floodConnections(port: number, count: number): Promise<{ sockets: net.Socket[]; closed: () => number }> {
  let closed = 0;
  const sockets: net.Socket[] = [];
  const opening: Promise<void>[] = [];
  for (let i = 0; i < count; i++) {
    opening.push(
      new Promise<void>((resolve) => {
        const socket = net.connect(port, "127.0.0.1");
        socket.on("error", () => {});
        socket.on("close", () => {
          closed++;
          resolve();
        });
        socket.on("connect", () => resolve());
        socket.on("data", () => {}); // the server's greeting, read and dropped
        sockets.push(socket);
      }),
    );
    // Keep a few hundred connects in flight, not thousands at once.
    if (opening.length % 256 === 0) await Promise.all(opening.slice(-256));
  }
  await Promise.all(opening);
  return { sockets, closed: () => closed };
}

/** The subscriber's counters of the first upstream in /v1/stats. */
export async function subscriberStats(url: string): Promise<any> {
  const stats = (await (await fetch(`${url}/v1/stats`)).json()) as any;
  return { ...stats.upstreams[0].kv_events, proxy: stats.proxy };
}
