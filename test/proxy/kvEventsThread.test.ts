/**
 * The KV-events thread (src/proxy/kvEventsThread.ts): subscribers in a Bun Worker against fake
 * engines; the request thread's UpstreamCacheSync must hold exactly each engine's cache after its
 * batches, get the subscriber's counters, survive the thread dying, and close cleanly.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { mirrorBlockKeys } from "../../src/proxy/engineCacheMirror.ts";
import { parseKvEventsSubscribe } from "../../src/proxy/kvEventSubscriber.ts";
import { KvEventsThread, type KvEventsSubscription } from "../../src/proxy/kvEventsThread.ts";
import { UpstreamCacheSync } from "../../src/proxy/upstreamCacheSync.ts";
import { FakeEngine } from "../helpers/fakeEngine/fakeEngine.ts";
import { cleanupAfterEach, until } from "../helpers/testLifecycle.ts";
import { sleep } from "../../src/runtime/sleep.ts";

setDefaultTimeout(30_000);

const cleanup = cleanupAfterEach();
const BLOCK = 4;

async function fakeEngine(): Promise<FakeEngine> {
  const engine = await FakeEngine.start({ blockSize: BLOCK, capacityBlocks: 12, kvEvents: {} });
  cleanup(() => engine.close());
  return engine;
}

function prompt(i: number): number[] {
  const doc = (d: number) => Array.from({ length: 8 }, (_, t) => 1000 + d * 8 + t);
  return [1, 2, 3, 4, ...doc(i % 5), ...doc((i * 3) % 7), i];
}

/** The engine's true cached run of a prompt's blocks, from the first. */
function engineCachedBlocks(engine: FakeEngine, tokens: number[]): number {
  const hashes = engine.cache.hashes(tokens);
  let run = 0;
  while (run < hashes.length && engine.blocks.has(hashes[run]!)) run++;
  return run;
}

/** Publishes what the engine did and waits until the request thread has its last batch. */
async function settle(engine: FakeEngine, subscription: KvEventsSubscription): Promise<void> {
  engine.kvEvents.flush();
  const last = engine.kvEvents.stats.batches - 1;
  await until(() => subscription.stats.lastSeq === last, `batch ${last} (at ${subscription.stats.lastSeq})`);
}

function expectMirrorsEngine(sync: UpstreamCacheSync, engine: FakeEngine, prompts: number[][]): void {
  expect(sync.stats.blocks).toBe(engine.blocks.size);
  for (const tokens of prompts) expect(sync.cachedBlocks(mirrorBlockKeys(tokens, BLOCK))).toBe(engineCachedBlocks(engine, tokens));
}

describe("KvEventsThread", () => {
  test("two engines followed on one thread: each sync holds exactly its engine's cache after every batch, with the subscriber's counters", async () => {
    const engines = [await fakeEngine(), await fakeEngine()];
    const logged: string[] = [];
    const thread = new KvEventsThread((text) => logged.push(text));
    cleanup(() => thread.close());
    const syncs = engines.map(() => new UpstreamCacheSync(() => {}));
    const subscriptions = engines.map((engine, i) => {
      const subscription = thread.subscribe(parseKvEventsSubscribe(engine.kvEventsFlag)!);
      expect(subscription.stats).toMatchObject({ endpoint: engine.kvEventsEndpoint, connected: false, batches: 0 });
      subscription.start(syncs[i]!);
      return subscription;
    });
    await until(() => syncs.every((sync) => sync.live), "both mirrors live");
    const sent: number[][] = [];
    for (let i = 0; i < 20; i++) {
      const tokens = prompt(i);
      sent.push(tokens);
      const e = i % 2;
      engines[e]!.process(tokens);
      await settle(engines[e]!, subscriptions[e]!);
      expectMirrorsEngine(syncs[e]!, engines[e]!, sent);
    }
    for (const [i, subscription] of subscriptions.entries()) {
      expect(subscription.stats).toMatchObject({ connected: true, batches: 10, resyncs: 0, malformed: {} });
      expect(syncs[i]!.stats.blocks).toBe(12);
    }
    expect(logged).toEqual([]);
  });

  test("a thread that dies: the mirrors are dropped and it is logged; a new thread follows again and catches up", async () => {
    const engine = await fakeEngine();
    const logged: string[] = [];
    const evicted: string[] = [];
    const thread = new KvEventsThread((text) => logged.push(text));
    cleanup(() => thread.close());
    const sync = new UpstreamCacheSync((ids) => evicted.push(...ids));
    const subscription = thread.subscribe(parseKvEventsSubscribe(engine.kvEventsFlag)!);
    subscription.start(sync);
    await until(() => sync.live, "the mirror live");
    engine.process(prompt(0));
    await settle(engine, subscription);
    sync.track("ctx", mirrorBlockKeys(prompt(0), BLOCK));
    expect(sync.stats.blocks).toBeGreaterThan(0);
    (thread as unknown as { worker: Worker }).worker.terminate();
    await until(() => logged.length > 0, "the failure logged");
    expect(logged[0]).toContain("the KV events thread failed");
    expect(sync.live).toBe(false);
    expect(sync.stats.blocks).toBe(0);
    expect(evicted).toEqual(["ctx"]);
    // The new thread replays the engine's buffer: the mirror is whole again without new traffic.
    await until(() => sync.live && sync.stats.blocks === engine.blocks.size, "the new thread's mirror");
    engine.process(prompt(1));
    await settle(engine, subscription);
    expectMirrorsEngine(sync, engine, [prompt(0), prompt(1)]);
  });

  test("close stops the thread: no more batches; closing twice is fine", async () => {
    const engine = await fakeEngine();
    const thread = new KvEventsThread(() => {});
    const sync = new UpstreamCacheSync(() => {});
    const subscription = thread.subscribe(parseKvEventsSubscribe(engine.kvEventsFlag)!);
    subscription.start(sync);
    await until(() => sync.live, "the mirror live");
    await thread.close();
    await thread.close();
    const blocks = sync.stats.blocks;
    engine.process(prompt(2));
    engine.kvEvents.flush();
    await sleep(200);
    expect(sync.stats.blocks).toBe(blocks);
    expect(engine.kvEvents.stats.subscribers).toBe(0);
  });
});
