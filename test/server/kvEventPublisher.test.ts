/**
 * The KV events publisher against libzmq (zmqPeer.mjs under Node): one message per event-loop
 * turn, [topic, 8-byte big-endian sequence number from 0, payload]; replay from a sequence number
 * over DEALER and REQ, ended by seq -1; the bounded replay buffer; the flag's syntax.
 */
import { decode } from "@msgpack/msgpack";
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { END_OF_REPLAY_SEQ, KvEventPublisher, REPLAY_BUFFER_BYTES, REPLAY_BUFFER_STEPS, parseKvEventsPublish } from "../../src/server/kvEventPublisher.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";

setDefaultTimeout(60_000);

const hex = (n: number) => n.toString(16).padStart(32, "0");
const seqOf = (frame: Uint8Array) => new DataView(frame.buffer, frame.byteOffset, 8).getBigInt64(0, false);
const eventsOf = (payload: Uint8Array) => (decode(payload) as { events: { type: string }[] }).events;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function open(flag: string, now?: () => number): Promise<KvEventPublisher> {
  const publisher = await KvEventPublisher.open(parseKvEventsPublish(flag), { now });
  cleanups.push(() => publisher.close());
  return publisher;
}

async function subscriber(publisher: KvEventPublisher, topic = "", expected = 1): Promise<ZmqPeer> {
  const peer = await ZmqPeer.subscribe(publisher.endpoint, topic);
  cleanups.push(() => peer.close());
  const deadline = Date.now() + 10_000;
  while (publisher.stats.subscribers < expected) {
    if (Date.now() > deadline) throw new Error("the subscriber did not subscribe");
    await Bun.sleep(10);
  }
  return peer;
}

describe("parseKvEventsPublish", () => {
  test("an endpoint, then replay=, topic=, hashes= and layout= in any order", () => {
    expect(parseKvEventsPublish("tcp://*:5557")).toEqual({ endpoint: { host: null, port: 5557 }, replay: null, topic: "", hashes: "bytes", layout: "map" });
    expect(parseKvEventsPublish("tcp://0.0.0.0:5557,hashes=int,replay=tcp://*:5558,layout=array,topic=kv")).toEqual({
      endpoint: { host: "0.0.0.0", port: 5557 },
      replay: { host: null, port: 5558 },
      topic: "kv",
      hashes: "int",
      layout: "array",
    });
  });

  test("bad values say what is wrong", () => {
    const cases: [string, string][] = [
      ["", "'' is not a tcp://HOST:PORT endpoint"],
      ["localhost:5557", "'localhost:5557' is not a tcp://HOST:PORT endpoint"],
      ["tcp://*:5557,replay=5558", "'5558' is not a tcp://HOST:PORT endpoint"],
      ["tcp://*:5557,hashes=hex", "hashes= must be bytes or int, got 'hex'"],
      ["tcp://*:5557,layout=json", "layout= must be map, array or mixed, got 'json'"],
      ["tcp://*:5557,speed=fast", "unknown setting 'speed=fast' (expected replay=, topic=, hashes= or layout=)"],
      ["tcp://*:5557,topic=a,topic=b", "topic= is given twice"],
      ["tcp://*:5557,replay=tcp://*:5557", "the replay endpoint must differ from the publish endpoint"],
    ];
    for (const [value, message] of cases) expect(() => parseKvEventsPublish(value)).toThrow(message);
  });
});

describe("KvEventPublisher", () => {
  test("the events of one turn are one message: [topic, seq, payload], seq from 0 up by one", async () => {
    let clock = 1000.5;
    const publisher = await open("tcp://127.0.0.1:0,topic=kv", () => clock++);
    const peer = await subscriber(publisher);
    publisher.stored([{ hash: hex(1), parent: null, tokens: [1, 2] }]);
    publisher.stored([{ hash: hex(2), parent: hex(1), tokens: [3, 4] }]);
    publisher.removed([hex(9)]);
    await Bun.sleep(5);
    publisher.cleared();
    await Bun.sleep(5);
    publisher.removed([]);
    publisher.stored([{ hash: hex(3), parent: null, tokens: [5, 6] }]);
    const messages = await peer.take("message", 3);
    expect(await peer.drain("message")).toEqual([]);
    expect(messages.map((m) => m.length)).toEqual([3, 3, 3]);
    expect(messages.map((m) => new TextDecoder().decode(m[0]))).toEqual(["kv", "kv", "kv"]);
    expect(messages.map((m) => Array.from(m[1]!))).toEqual([0, 1, 2].map((seq) => [0, 0, 0, 0, 0, 0, 0, seq]));
    expect(messages.map((m) => eventsOf(m[2]!).map((e) => e.type))).toEqual([["BlockStored", "BlockStored", "BlockRemoved"], ["AllBlocksCleared"], ["BlockStored"]]);
    expect(messages.map((m) => (decode(m[2]!) as { ts: number }).ts)).toEqual([1000.5, 1001.5, 1002.5]);
    expect(publisher.stats).toMatchObject({ batches: 3, events: 5, subscribers: 1, replayRequests: 0, dropped: 0, refusedConnections: 0, handshakeTimeouts: 0, replayBufferBatches: 3 });
    expect(publisher.metrics()).toContain("ctxr_kv_events_batches_total 3\n");
    expect(publisher.metrics()).toContain("ctxr_kv_events_total 5\n");
  });

  test("a subscriber to another topic gets nothing; close() publishes what is pending", async () => {
    const publisher = await open("tcp://127.0.0.1:0");
    const other = await subscriber(publisher, "other");
    const all = await subscriber(publisher, "", 2);
    publisher.cleared();
    await publisher.close();
    expect((await all.take("message", 1)).length).toBe(1);
    expect(await other.drain("message")).toEqual([]);
    publisher.cleared();
    expect(publisher.stats.batches).toBe(1);
  });

  test("replay: every kept batch from the asked sequence number, the live payloads, then seq -1 and an empty payload", async () => {
    const publisher = await open("tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0");
    expect(publisher.replayEndpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    const peer = await subscriber(publisher);
    for (let i = 0; i < 5; i++) {
      publisher.stored([{ hash: hex(i + 1), parent: i === 0 ? null : hex(i), tokens: [i] }]);
      publisher.flush();
    }
    const live = await peer.take("message", 5);

    peer.requestReplay(publisher.replayEndpoint!, 2);
    const replayed = await peer.take("replay", 4);
    expect(replayed.map((m) => m.length)).toEqual([2, 2, 2, 2]);
    expect(replayed.slice(0, 3).map((m) => seqOf(m[0]!))).toEqual([2n, 3n, 4n]);
    expect(replayed.slice(0, 3).map((m) => m[1])).toEqual(live.slice(2).map((m) => m[2]!));
    expect(replayed[3]).toEqual([END_OF_REPLAY_SEQ, new Uint8Array(0)]);
    expect(seqOf(replayed[3]![0]!)).toBe(-1n);

    // Past the end: only the end marker.
    peer.requestReplay(publisher.replayEndpoint!, 99);
    expect((await peer.take("replay", 1)).map((m) => seqOf(m[0]!))).toEqual([-1n]);
    // A REQ client (vLLM's example subscriber) frames its request with an empty delimiter; libzmq's REQ takes the first answer.
    peer.requestReplay(publisher.replayEndpoint!, 1, "req");
    const req = await peer.take("replay", 1);
    expect(req.map((m) => [seqOf(m[0]!), m[1]])).toEqual([[1n, live[1]![2]!]]);
    expect(publisher.stats.replayRequests).toBe(3);
  });

  test(`the replay buffer keeps at most ${REPLAY_BUFFER_BYTES / 1024 / 1024} MiB of payloads: the oldest go first`, async () => {
    const publisher = await open("tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0");
    const big = new Uint8Array(20 * 1024 * 1024);
    for (let i = 0; i < 10; i++) publisher.publishPayload(big);
    expect(publisher.stats.replayBufferBytes).toBeLessThanOrEqual(REPLAY_BUFFER_BYTES);
    expect(publisher.stats.replayBufferBatches).toBe(Math.floor(REPLAY_BUFFER_BYTES / big.length));
    const peer = await ZmqPeer.subscribe(publisher.endpoint);
    cleanups.push(() => peer.close());
    peer.requestReplay(publisher.replayEndpoint!, 0);
    const replayed = await peer.take("replay", 4, 60_000);
    expect(replayed.map((m) => seqOf(m[0]!))).toEqual([7n, 8n, 9n, -1n]);
  });

  test(`the replay buffer keeps the last ${REPLAY_BUFFER_STEPS} batches`, async () => {
    const publisher = await open("tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0");
    const peer = await subscriber(publisher);
    const total = REPLAY_BUFFER_STEPS + 7;
    for (let i = 0; i < total; i++) {
      publisher.removed([hex(i)]);
      publisher.flush();
    }
    peer.requestReplay(publisher.replayEndpoint!, 0);
    const replayed = await peer.take("replay", REPLAY_BUFFER_STEPS + 1);
    expect(await peer.drain("replay")).toEqual([]);
    const seqs = replayed.map((m) => seqOf(m[0]!));
    expect(seqs.length).toBe(REPLAY_BUFFER_STEPS + 1);
    expect(seqs[0]).toBe(7n);
    expect(seqs.at(-2)).toBe(BigInt(total - 1));
    expect(seqs.at(-1)).toBe(-1n);
    expect(seqs.slice(0, -1).every((seq, i) => seq === BigInt(7 + i))).toBe(true);
    const hashes = (m: Uint8Array[]) => (decode(m[1]!) as { events: { block_hashes: Uint8Array[] }[] }).events[0]!.block_hashes;
    expect(hashes(replayed[0]!)).toEqual([Uint8Array.from(Buffer.from(hex(7), "hex"))]);
  });

  test("a replay endpoint in use fails the open and frees the publish endpoint", async () => {
    const first = await open("tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0");
    const replayPort = Number(first.replayEndpoint!.split(":").at(-1));
    const options = parseKvEventsPublish(`tcp://127.0.0.1:0,replay=tcp://127.0.0.1:${replayPort}`);
    await expect(KvEventPublisher.open(options)).rejects.toThrow(`cannot bind tcp://127.0.0.1:${replayPort}: the port is in use`);
    const publishPort = Number(first.endpoint.split(":").at(-1));
    await first.close();
    // Both ports are free again.
    const again = await open(`tcp://127.0.0.1:${publishPort},replay=tcp://127.0.0.1:${replayPort}`);
    expect(again.endpoint).toBe(`tcp://127.0.0.1:${publishPort}`);
  });
});
