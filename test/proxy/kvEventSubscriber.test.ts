/**
 * The KV events subscriber against the fake engine (ctxr's publisher, faults injected on its
 * wire) and against libzmq's PUB and ROUTER: a consumer that keeps the set of cached block keys
 * must hold exactly the engine's cache after every batch, through events out of order, lost
 * batches (recovered by replay, or beyond the replay buffer: resync), engine restarts, malformed
 * and oversized messages, and either side starting first.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { cleanupAfterEach, until } from "../helpers/testLifecycle.ts";
import { allBlocksClearedEvent, blockRemovedEvent, blockStoredEvents, encodeKvEventBatch, KV_EVENT_LAYOUTS } from "../../src/kv/kvEventBatch.ts";
import { REPLAY_BUFFER_STEPS } from "../../src/server/kvEventPublisher.ts";
import { KvEventSubscriber, parseKvEventsSubscribe, type KvEventBatchIn, type KvEventConsumer, type KvEventResyncReason, type KvEventSubscriberSettings } from "../../src/proxy/kvEventSubscriber.ts";
import { promptBlockHashes } from "../../src/kv/prefixBlockCache.ts";
import { FakeEngine, type FakeKvEventsOptions } from "../helpers/fakeEngine/fakeEngine.ts";
import { freeTcpPort } from "../helpers/freeTcpPort.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";
import { sleep } from "../../src/runtime/sleep.ts";

setDefaultTimeout(30_000);

const cleanup = cleanupAfterEach();

/** The smallest consumer: the set of block keys the engine holds, as the events say. */
class BlockView implements KvEventConsumer {
  readonly keys = new Set<string>();
  readonly seqs: number[] = [];
  readonly signals: string[] = [];
  /** Times the connection's replay ended (or there was none to make): live batches since are new. */
  caughtUps = 0;

  batch(batch: KvEventBatchIn): void {
    this.seqs.push(Number(batch.seq));
    for (const event of batch.events) {
      if (event.type === "BlockStored") for (const key of event.hashes) this.keys.add(key);
      else if (event.type === "BlockRemoved") for (const key of event.hashes) this.keys.delete(key);
      else this.keys.clear();
    }
  }

  resync(reason: KvEventResyncReason): void {
    this.signals.push(`resync ${reason}`);
    this.keys.clear();
  }

  connected(): void {
    this.signals.push("connected");
  }

  disconnected(): void {
    this.signals.push("disconnected");
  }

  gapRecovered(from: bigint, to: bigint): void {
    this.signals.push(`recovered ${from}-${to}`);
  }

  caughtUp(): void {
    this.caughtUps++;
  }
}

const FAST: KvEventSubscriberSettings = { gapWaitMs: 20, replayTimeoutMs: 1000, sockets: { reconnectMs: 20, maxReconnectMs: 200 } };

async function fakeEngine(kvEvents: FakeKvEventsOptions = {}, capacityBlocks = 12): Promise<FakeEngine> {
  const engine = await FakeEngine.start({ blockSize: 4, capacityBlocks, kvEvents });
  cleanup(() => engine.close());
  return engine;
}

function subscribe(flag: string, settings: KvEventSubscriberSettings = {}) {
  const logged: string[] = [];
  const subscriber = new KvEventSubscriber(parseKvEventsSubscribe(flag)!, { ...FAST, log: (line) => logged.push(line), ...settings });
  const view = new BlockView();
  subscriber.start(view);
  cleanup(() => subscriber.close());
  return { subscriber, view, logged };
}

/**
 * Waits until the subscription is up and the connection's replay has ended, so that a batch
 * published next arrives live only (otherwise, on a loaded machine, the replay can carry it too).
 */
async function subscribed(engine: FakeEngine, subscriber: KvEventSubscriber, view: BlockView): Promise<void> {
  await until(() => subscriber.stats.connected && engine.kvEvents.stats.subscribers === 1 && view.caughtUps > 0, "the subscription and its replay");
}

/** Publishes what the engine did, then waits until the subscriber has applied its last batch. */
async function settle(engine: FakeEngine, subscriber: KvEventSubscriber): Promise<void> {
  engine.kvEvents.flush();
  const last = engine.kvEvents.stats.batches - 1;
  await until(() => subscriber.stats.lastSeq === last && subscriber.stats.connected, `batch ${last} (at ${subscriber.stats.lastSeq})`);
}

/** Prompts sharing prefixes (documents in different orders), so blocks are hit, stored and evicted. */
function prompt(i: number): number[] {
  const doc = (d: number) => Array.from({ length: 8 }, (_, t) => 1000 + d * 8 + t);
  return [1, 2, 3, 4, ...doc(i % 5), ...doc((i * 3) % 7), i];
}

describe("KvEventSubscriber with the fake engine", () => {
  for (const layout of KV_EVENT_LAYOUTS) {
    for (const hashes of ["bytes", "int"] as const) {
      test(`the view equals the engine's cache after every batch (${layout} layout, ${hashes} hashes)`, async () => {
        const engine = await fakeEngine({ layout, hashes });
        const { subscriber, view } = subscribe(engine.kvEventsFlag);
        await subscribed(engine, subscriber, view);
        for (let i = 0; i < 25; i++) {
          engine.process(prompt(i));
          await settle(engine, subscriber);
          expect(view.keys).toEqual(engine.blockKeys());
        }
        expect(engine.blocks.size).toBe(12);
        expect(subscriber.stats).toMatchObject({ batches: 25, gaps: 0, resyncs: 0, malformed: {}, layout, duplicates: 0 });
        expect(subscriber.stats.lastEventLagMs).toBeGreaterThanOrEqual(0);
        expect(subscriber.stats.lastEventLagMs).toBeLessThan(5000);
      });
    }
  }

  test("events out of order: the late batch fills the gap before any replay", async () => {
    const engine = await fakeEngine();
    const { subscriber, view } = subscribe(engine.kvEventsFlag, { gapWaitMs: 5000 });
    await subscribed(engine, subscriber, view);
    await sleep(50);
    for (let i = 0; i < 6; i += 2) {
      // Batch i goes out after batch i + 1.
      engine.faults.reorder(1);
      engine.process(prompt(i));
      engine.kvEvents.flush();
      engine.process(prompt(i + 1));
      await settle(engine, subscriber);
      expect(view.keys).toEqual(engine.blockKeys());
    }
    expect(view.seqs).toEqual([0, 1, 2, 3, 4, 5]);
    // The connection's replay of the (empty) buffer, and none since.
    expect(subscriber.stats).toMatchObject({ gaps: 3, replays: 1, resyncs: 0 });
  });

  test("lost batches come back through the replay socket: no resync, the view exact", async () => {
    const engine = await fakeEngine();
    const { subscriber, view } = subscribe(engine.kvEventsFlag);
    await subscribed(engine, subscriber, view);
    engine.process(prompt(0));
    await settle(engine, subscriber);
    engine.faults.drop(3);
    for (let i = 1; i <= 4; i++) {
      engine.process(prompt(i));
      engine.kvEvents.flush();
    }
    await settle(engine, subscriber);
    expect(engine.faults.dropped).toBe(3);
    expect(view.keys).toEqual(engine.blockKeys());
    expect(view.seqs).toEqual([0, 1, 2, 3, 4]);
    expect(view.signals).toEqual(["connected", "recovered 1-3"]);
    expect(subscriber.stats).toMatchObject({ gaps: 1, recoveredGaps: 1, resyncs: 0, replayedBatches: 4 });
  });

  test(`loss beyond the replay buffer (${REPLAY_BUFFER_STEPS} batches): resync, then the view from what the buffer still has`, async () => {
    const engine = await fakeEngine({}, 4);
    const { subscriber, view } = subscribe(engine.kvEventsFlag);
    await subscribed(engine, subscriber, view);
    engine.process([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    await settle(engine, subscriber);
    const first = engine.blockKeys();
    // Lost: the batch that evicts the first prompt's blocks, then more batches than the buffer keeps.
    engine.faults.drop(1 + REPLAY_BUFFER_STEPS);
    engine.process([11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]);
    engine.kvEvents.flush();
    for (let i = 0; i < REPLAY_BUFFER_STEPS; i++) engine.kvEvents.publishPayload(encodeKvEventBatch(Date.now() / 1000, []));
    engine.process([31, 32, 33, 34, 35]);
    await settle(engine, subscriber);
    expect(view.signals).toEqual(["connected", "resync gap"]);
    // The second prompt's blocks were stored in a lost batch: unknown until stored again. The first prompt's are gone, as in the engine.
    for (const key of first) expect(view.keys.has(key)).toBe(false);
    expect(view.keys).toEqual(new Set([engine.keyOf(promptBlockHashes("fake-engine", [31, 32, 33, 34], 4)[0]!)]));
    expect([...view.keys].every((key) => engine.blockKeys().has(key))).toBe(true);
    expect(subscriber.stats).toMatchObject({ gaps: 1, replays: 2, recoveredGaps: 0, resyncs: 1, resyncReasons: { gap: 1 } });
  });

  for (const reconnect of [true, false]) {
    for (const clearEvent of [false, true]) {
      test(`an engine restart (${reconnect ? "new process: the connection drops" : "sequence back to 0 on the same connection"}, ${clearEvent ? "with" : "without"} AllBlocksCleared): resync, then the new engine's cache`, async () => {
        const engine = await fakeEngine();
        const { subscriber, view } = subscribe(engine.kvEventsFlag);
        await subscribed(engine, subscriber, view);
        for (let i = 0; i < 3; i++) {
          engine.process(prompt(i));
          await settle(engine, subscriber);
        }
        expect(view.keys.size).toBeGreaterThan(0);
        await engine.restart({ reconnect, clearEvent });
        engine.process(prompt(7));
        if (reconnect) await until(() => subscriber.stats.connections === 2, "the reconnect");
        await settle(engine, subscriber);
        expect(view.keys).toEqual(engine.blockKeys());
        expect(view.signals).toEqual(reconnect ? ["connected", "disconnected", "resync reconnect", "connected"] : ["connected", "resync restart"]);
      });
    }
  }

  test("malformed and oversized messages are counted by kind and logged once per kind; the subscriber goes on", async () => {
    const engine = await fakeEngine();
    const { subscriber, view, logged } = subscribe(engine.kvEventsFlag, { maxMessageBytes: 64 * 1024 });
    await subscribed(engine, subscriber, view);
    engine.process(prompt(0));
    await settle(engine, subscriber);
    const text = (value: string) => new TextEncoder().encode(value);
    for (let round = 0; round < 2; round++) {
      engine.kvEvents.sendFrames([text(""), text("no sequence number or payload")]);
      engine.kvEvents.sendFrames([text(""), text("short"), text("payload")]);
      engine.kvEvents.publishPayload(text("not msgpack \xc1"));
      engine.kvEvents.publishPayload(encodeKvEventBatch(1, [{ type: "BlockStored", block_hashes: [] } as never]));
      engine.kvEvents.publishPayload(Uint8Array.of(0xa3, 0x61, 0x62, 0x63));
      engine.kvEvents.publishPayload(new Uint8Array(200 * 1024).fill(0x90));
    }
    engine.process(prompt(1));
    await settle(engine, subscriber);
    expect(subscriber.stats.malformed).toEqual({ frames: 2, sequence: 2, msgpack: 2, event: 2, batch: 2, oversized: 2 });
    expect(logged.length).toBe(6);
    expect(logged.find((line) => line.includes("(event)"))).toContain("block_size must be an integer");
    expect(logged.every((line) => line.startsWith(`ctxr serve: KV events from ${engine.kvEventsEndpoint}: malformed (`))).toBe(true);
    // Every unusable batch leaves the view behind: resync (only when there was a view to drop).
    expect(view.signals).toEqual(["connected", "resync malformed"]);
    expect(subscriber.stats.resyncReasons).toEqual({ malformed: 1 });
    // From the next good batch on, the view follows again (blocks stored before the resync are unknown).
    const after = engine.blockKeys();
    expect([...view.keys].every((key) => after.has(key))).toBe(true);
    expect(view.keys.size).toBeGreaterThan(0);
  });

  test("a subscriber that starts after the engine learns its cache from the replay buffer at once", async () => {
    const engine = await fakeEngine();
    for (let i = 0; i < 20; i++) {
      engine.process(prompt(i));
      engine.kvEvents.flush();
    }
    const { subscriber, view } = subscribe(engine.kvEventsFlag);
    await until(() => subscriber.stats.lastSeq === 19, "the replayed batches");
    expect(view.keys).toEqual(engine.blockKeys());
    expect(subscriber.stats).toMatchObject({ replayedBatches: 20, resyncs: 0 });
    engine.process(prompt(20));
    await settle(engine, subscriber);
    expect(view.keys).toEqual(engine.blockKeys());
  });

  test("without a replay socket a late subscriber follows from the first batch it gets", async () => {
    const engine = await fakeEngine({ replayPort: null });
    engine.process(prompt(0));
    engine.kvEvents.flush();
    const { subscriber, view } = subscribe(engine.kvEventsFlag);
    await until(() => engine.kvEvents.stats.subscribers === 1, "the subscription");
    engine.process(prompt(1));
    await settle(engine, subscriber);
    expect(view.seqs).toEqual([1]);
    expect([...view.keys].every((key) => engine.blockKeys().has(key))).toBe(true);
  });

  test("an engine that starts after the subscriber: it dials until the engine is there", async () => {
    const [port, replayPort] = [await freeTcpPort(), await freeTcpPort()];
    const { subscriber, view } = subscribe(`tcp://127.0.0.1:${port},replay=tcp://127.0.0.1:${replayPort}`);
    await sleep(100);
    expect(subscriber.stats.connected).toBe(false);
    const engine = await fakeEngine({ port, replayPort });
    await subscribed(engine, subscriber, view);
    engine.process(prompt(0));
    await settle(engine, subscriber);
    expect(view.keys).toEqual(engine.blockKeys());
  });

  test("a replay socket that never answers is given up after the timeout: resync, and on", async () => {
    const engine = await fakeEngine({ replayPort: null });
    const silent = await freeTcpPort();
    const { subscriber, view } = subscribe(`${engine.kvEventsEndpoint},replay=tcp://127.0.0.1:${silent}`, { replayTimeoutMs: 200 });
    await until(() => engine.kvEvents.stats.subscribers === 1, "the subscription");
    engine.process(prompt(0));
    // The connection's replay fails first; batch 0 waits for it, then applies.
    await settle(engine, subscriber);
    engine.faults.drop(1);
    engine.process(prompt(1));
    engine.kvEvents.flush();
    engine.process(prompt(2));
    await settle(engine, subscriber);
    expect(view.signals).toEqual(["connected", "resync replay-failed"]);
    expect(subscriber.stats).toMatchObject({ replays: 2, resyncs: 1 });
  });

  test("a consumer that throws is logged once and keeps getting batches", async () => {
    const engine = await fakeEngine();
    const logged: string[] = [];
    const subscriber = new KvEventSubscriber(parseKvEventsSubscribe(engine.kvEventsFlag)!, { ...FAST, log: (line) => logged.push(line) });
    cleanup(() => subscriber.close());
    let batches = 0;
    subscriber.start({
      batch: () => {
        batches++;
        throw new Error("consumer bug");
      },
      resync: () => {},
    });
    await until(() => engine.kvEvents.stats.subscribers === 1, "the subscription");
    for (let i = 0; i < 3; i++) engine.process(prompt(i));
    await settle(engine, subscriber);
    engine.process(prompt(3));
    await settle(engine, subscriber);
    expect(batches).toBe(2);
    expect(logged.length).toBe(1);
    expect(logged[0]).toContain("the consumer failed: Error: consumer bug");
  });
});

describe("KvEventSubscriber with libzmq's PUB and ROUTER (vLLM's replay framing)", () => {
  test("SGLang's array layout with integer hashes; a lost batch is replayed through libzmq's ROUTER", async () => {
    const libzmq = await ZmqPeer.publisher();
    cleanup(() => libzmq.close());
    const { subscriber, view } = subscribe(`${libzmq.started!.pub},replay=${libzmq.started!.replay}`);
    await libzmq.take("subscribed", 1);
    await until(() => view.caughtUps > 0, "the connection's replay");
    const [a, b] = promptBlockHashes("s", [1, 2, 3, 4], 2);
    const batch = (events: Parameters<typeof encodeKvEventBatch>[1]) => encodeKvEventBatch(Date.now() / 1000, events, { layout: "array" });
    libzmq.publish(batch(blockStoredEvents([{ hash: a!, parent: null, tokens: [1, 2] }], "int")));
    await until(() => subscriber.stats.lastSeq === 0, "batch 0");
    // Batch 1 is kept for replay but lost on the way: batch 2 shows the gap.
    libzmq.publish(batch(blockStoredEvents([{ hash: b!, parent: a!, tokens: [3, 4] }], "int")), "", false);
    libzmq.publish(batch([blockRemovedEvent([a!], "int")]));
    await until(() => subscriber.stats.lastSeq === 2, "batch 2");
    expect(view.keys).toEqual(new Set([BigInt(`0x${b!.slice(16)}`).toString()]));
    expect(view.signals).toEqual(["connected", "recovered 1-1"]);
    libzmq.publish(batch([allBlocksClearedEvent()]));
    await until(() => subscriber.stats.lastSeq === 3, "batch 3");
    expect(view.keys.size).toBe(0);
    expect(subscriber.stats).toMatchObject({ layout: "array", resyncs: 0, malformed: {}, replays: 2 });
    const requests = await libzmq.take("request", 2);
    // [empty delimiter, start]: the only request vLLM's ROUTER answers (the connection's, then the gap's).
    expect(requests.map((frames) => frames.map((frame) => Buffer.from(frame).toString("hex")))).toEqual([
      ["", "0000000000000000"],
      ["", "0000000000000001"],
    ]);
  });
});
