/** KvEventBatcher: the events of one event-loop turn are one batch; nothing empty is handed on; discard and stop. */
import { describe, expect, test } from "bun:test";
import type { KvCacheEvent } from "../../src/kv/kvEventBatch.ts";
import { KvEventBatcher } from "../../src/server/kvEventBatcher.ts";

const hex = (n: number) => n.toString(16).padStart(32, "0");
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

function batcher(): { batcher: KvEventBatcher; batches: KvCacheEvent[][] } {
  const batches: KvCacheEvent[][] = [];
  return { batcher: new KvEventBatcher("bytes", (events) => batches.push(events)), batches };
}

describe("KvEventBatcher", () => {
  test("the events of one turn are one batch, in order; the next turn's the next", async () => {
    const { batcher: events, batches } = batcher();
    events.stored([{ hash: hex(1), parent: null, tokens: [1, 2] }]);
    events.removed([hex(7)]);
    events.cleared();
    expect(batches).toEqual([]);
    await turn();
    events.stored([{ hash: hex(2), parent: null, tokens: [3] }]);
    await turn();
    expect(batches.map((batch) => batch.map((event) => event.type))).toEqual([["BlockStored", "BlockRemoved", "AllBlocksCleared"], ["BlockStored"]]);
    expect(events.events).toBe(4);
  });

  test("removing no block is no event, and a turn without events is no batch", async () => {
    const { batcher: events, batches } = batcher();
    events.removed([]);
    events.stored([]);
    await turn();
    events.flush();
    expect(batches).toEqual([]);
    expect(events.events).toBe(0);
  });

  test("flush hands on at once; discard forgets; stop hands on what is pending and ignores what comes after", async () => {
    const { batcher: events, batches } = batcher();
    events.cleared();
    events.flush();
    expect(batches.length).toBe(1);
    events.cleared();
    events.discard();
    await turn();
    expect(batches.length).toBe(1);
    events.removed([hex(1)]);
    events.stop();
    expect(batches.length).toBe(2);
    events.cleared();
    await turn();
    events.flush();
    expect(batches.length).toBe(2);
    expect(events.events).toBe(2);
  });
});
