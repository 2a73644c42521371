/**
 * `--kv-events-publish` on a thread of its own (issue 27): the PUB and replay sockets keep
 * refusing and timing out connections while the request thread is busy (the in-thread publisher,
 * for contrast, does nothing until it is free); batches reach a libzmq subscriber (zmqPeer.mjs
 * under Node) numbered from 0, replay answers, /metrics counts are the thread's current ones; a
 * thread that dies is logged and started again on the same ports, numbering on; a port in use
 * fails the open.
 */
import { decode } from "@msgpack/msgpack";
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { createServer, type AddressInfo } from "node:net";
import { END_OF_REPLAY_SEQ, KvEventPublisher, parseKvEventsPublish } from "../../src/server/kvEventPublisher.ts";
import { KvEventsPublishThread } from "../../src/server/kvEventsPublishThread.ts";
import { idleConnections } from "../helpers/idleConnectionsPeer.ts";
import { until } from "../helpers/testLifecycle.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";

setDefaultTimeout(60_000);

const hex = (n: number) => n.toString(16).padStart(32, "0");
const seqOf = (frame: Uint8Array) => new DataView(frame.buffer, frame.byteOffset, 8).getBigInt64(0, false);
const eventsOf = (payload: Uint8Array) => (decode(payload) as { events: { type: string }[] }).events;
const portOf = (endpoint: string) => Number(endpoint.slice(endpoint.lastIndexOf(":") + 1));
const metric = (text: string, name: string) => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(text)?.[1] ?? NaN);

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function openThread(flag: string, limits: { maxConnections?: number; handshakeTimeoutMs?: number } = {}, log: (text: string) => void = () => {}): Promise<KvEventsPublishThread> {
  const thread = await KvEventsPublishThread.open({ ...parseKvEventsPublish(flag), ...limits }, log);
  cleanups.push(() => thread.close());
  return thread;
}

async function subscriber(thread: KvEventsPublishThread): Promise<ZmqPeer> {
  const peer = await ZmqPeer.subscribe(thread.endpoint);
  cleanups.push(() => peer.close());
  await until(async () => (await thread.freshStats()).subscribers === 1, "the subscriber subscribed", 10_000, 10);
  return peer;
}

const BUSY_MS = 2000;
const FLOOD = 5;

/**
 * Another process opens FLOOD idle connections to `port` while this thread is busy for BUSY_MS
 * (no event-loop turn): when did the server close them?
 */
async function closesWhileBusy(port: number): Promise<{ openedAt: number; closedAt: number[]; busyUntil: number }> {
  const peer = idleConnections(port, FLOOD, 200, 5000);
  await peer.ready;
  const busyUntil = Date.now() + BUSY_MS;
  while (Date.now() < busyUntil) {
    // the request thread at work (a long step, a big tokenization): nothing else runs on it
  }
  return { ...(await peer.result()), busyUntil };
}

describe("KvEventsPublishThread", () => {
  test("connections are refused at the cap and timed out at the handshake deadline while the request thread is busy", async () => {
    const thread = await openThread("tcp://127.0.0.1:0", { maxConnections: 1, handshakeTimeoutMs: 300 });
    const { openedAt, closedAt, busyUntil } = await closesWhileBusy(portOf(thread.endpoint));
    expect(openedAt).toBeLessThan(busyUntil - 1000);
    expect(closedAt.length).toBe(FLOOD);
    for (const at of closedAt) expect(at).toBeLessThan(busyUntil);
    const stats = await thread.freshStats();
    expect(stats.refusedConnections).toBe(FLOOD - 1);
    expect(stats.handshakeTimeouts).toBe(1);
  });

  test("for contrast, the in-thread publisher closes nothing until the request thread is free", async () => {
    const publisher = await KvEventPublisher.open({ ...parseKvEventsPublish("tcp://127.0.0.1:0"), maxConnections: 1, handshakeTimeoutMs: 300 });
    cleanups.push(() => publisher.close());
    const { closedAt, busyUntil } = await closesWhileBusy(portOf(publisher.endpoint));
    expect(closedAt.length).toBe(FLOOD);
    for (const at of closedAt) expect(at).toBeGreaterThanOrEqual(busyUntil);
  });

  test("the events of one turn are one message numbered from 0; replay answers; /metrics counts are the thread's now", async () => {
    const thread = await openThread("tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0,topic=kv");
    const peer = await subscriber(thread);
    thread.stored([{ hash: hex(1), parent: null, tokens: [1, 2] }]);
    thread.stored([{ hash: hex(2), parent: hex(1), tokens: [3, 4] }]);
    await Bun.sleep(5);
    thread.removed([hex(1)]);
    thread.removed([]);
    await Bun.sleep(5);
    thread.cleared();
    const messages = await peer.take("message", 3);
    expect(messages.map(([topic]) => new TextDecoder().decode(topic))).toEqual(["kv", "kv", "kv"]);
    expect(messages.map(([, seq]) => seqOf(seq!))).toEqual([0n, 1n, 2n]);
    expect(messages.map(([, , payload]) => eventsOf(payload!).map((e) => e.type))).toEqual([["BlockStored", "BlockStored"], ["BlockRemoved"], ["AllBlocksCleared"]]);

    peer.requestReplay(thread.replayEndpoint!, 1);
    const replay = await peer.take("replay", 3);
    expect(replay.map(([seq]) => Buffer.from(seq!).toString("hex"))).toEqual(["0000000000000001", "0000000000000002", Buffer.from(END_OF_REPLAY_SEQ).toString("hex")]);
    expect(replay[0]![1]).toEqual(messages[1]![2]!);

    const metrics = await thread.metrics();
    expect(metric(metrics, "ctxr_kv_events_batches_total")).toBe(3);
    expect(metric(metrics, "ctxr_kv_events_total")).toBe(4);
    expect(metric(metrics, "ctxr_kv_events_subscribers")).toBe(1);
    expect(metric(metrics, "ctxr_kv_events_replay_requests_total")).toBe(1);
    expect(metric(metrics, "ctxr_kv_events_replay_buffer_bytes")).toBe(messages.reduce((bytes, [, , payload]) => bytes + payload!.length, 0));
  });

  test("a thread that dies is logged and started again on the same ports; the sequence goes on, the batches of the gap lost", async () => {
    const logged: string[] = [];
    const thread = await openThread("tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0", {}, (text) => logged.push(text));
    const [endpoint, replayEndpoint] = [thread.endpoint, thread.replayEndpoint];
    const peer = await subscriber(thread);
    thread.stored([{ hash: hex(1), parent: null, tokens: [1, 2] }]);
    expect(seqOf((await peer.take("message", 1))[0]![1]!)).toBe(0n);

    (thread as unknown as { worker: Worker }).worker.terminate();
    await until(() => logged.some((line) => line.includes("the KV events publisher thread failed")), "the failure logged", 5000, 10);
    thread.stored([{ hash: hex(2), parent: hex(1), tokens: [3, 4] }]); // while it is down: lost
    await until(() => logged.some((line) => line.includes("is back")), "the thread back", 10_000, 20);
    expect(logged.join("")).toContain(`the KV events publisher thread is back on ${endpoint}; sequence numbers go on from 2`);
    expect([thread.endpoint, thread.replayEndpoint]).toEqual([endpoint, replayEndpoint]);
    expect(thread.restarts).toBe(1);

    // The same subscriber reconnects to the same port by itself.
    await until(async () => (await thread.freshStats()).subscribers === 1, "the subscriber back", 10_000, 20);
    thread.stored([{ hash: hex(3), parent: null, tokens: [5, 6] }]);
    const [after] = await peer.take("message", 1);
    expect(seqOf(after![1]!)).toBe(2n);
    expect(metric(await thread.metrics(), "ctxr_kv_events_batches_total")).toBe(3);
  });

  test("an endpoint in use fails the open with the system's error, and the other endpoint is free again", async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => taken.close(() => resolve())));
    const port = (taken.address() as AddressInfo).port;
    await expect(KvEventsPublishThread.open(parseKvEventsPublish(`tcp://127.0.0.1:${port}`))).rejects.toThrow(`cannot bind tcp://127.0.0.1:${port}: the port is in use`);

    const free = await openThread("tcp://127.0.0.1:0");
    const freePort = portOf(free.endpoint);
    await free.close();
    await expect(KvEventsPublishThread.open(parseKvEventsPublish(`tcp://127.0.0.1:${freePort},replay=tcp://127.0.0.1:${port}`))).rejects.toThrow("the port is in use");
    const again = await openThread(`tcp://127.0.0.1:${freePort}`);
    expect(again.endpoint).toBe(`tcp://127.0.0.1:${freePort}`);
  });
});
