/** The outage queue: sized in bytes, sent in entries under a cap, each the changes' JSON array. */
import { describe, expect, test } from "bun:test";
import type { SharedChange } from "../../src/state/sharedChange.ts";
import { UnsentBatches } from "../../src/state/unsentBatches.ts";

const change = (size: number): SharedChange => ({ c: "history", conversation: "c", messages: [["k", "x".repeat(size)]] });

describe("UnsentBatches", () => {
  test("bytes follow the queue; plans stay under the cap and carry the batches' changes in order", () => {
    const queue = new UnsentBatches();
    for (let n = 1; n <= 10; n++) queue.push({ n, changes: [change(1000), change(10)] });
    expect(queue.length).toBe(10);
    const perBatch = queue.bytes / 10;
    expect(perBatch).toBeGreaterThan(1000);

    const plan = queue.plan(3 * perBatch + 5)!;
    expect([plan.first, plan.n, plan.batches.length]).toEqual([1, 3, 3]);
    expect(plan.json.length).toBeLessThanOrEqual(3 * perBatch + 5);
    expect(JSON.parse(plan.json)).toEqual([change(1000), change(10), change(1000), change(10), change(1000), change(10)]);

    queue.shift(3);
    expect(queue.length).toBe(7);
    expect(queue.bytes).toBeCloseTo(7 * perBatch, 5);
    expect(queue.plan(1)!.batches.map((batch) => batch.n)).toEqual([4]);
    queue.shift(7);
    expect([queue.length, queue.bytes, queue.plan(100)]).toEqual([0, 0, null]);
  });

  test("a batch larger than the cap goes alone; an empty batch is an empty array", () => {
    const queue = new UnsentBatches();
    queue.push({ n: 1, changes: [change(5000)] });
    queue.push({ n: 2, changes: [] });
    expect(queue.plan(100)!.batches.map((batch) => batch.n)).toEqual([1]);
    queue.shift(1);
    expect(queue.plan(100)!.json).toBe("[]");
  });
});
