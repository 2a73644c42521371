import { describe, expect, test } from "bun:test";
import { PendingChanges } from "../../src/state/pendingChanges.ts";
import { historyCell, labelCell, type SharedChange } from "../../src/state/sharedChange.ts";

const labels = (conversation: string, ...keys: string[]): SharedChange => ({ c: "service", r: { op: "conversation", conversation, entries: keys.map((k) => [k, `[${k}]`]) } });
const history = (conversation: string, ...keys: string[]): SharedChange => ({ c: "history", conversation, messages: keys.map((k) => [k, k]) });
const reset: SharedChange = { c: "service", r: { op: "reset" } };

describe("PendingChanges", () => {
  test("a cell stays pending until every own batch that wrote it comes back", () => {
    const pending = new PendingChanges();
    pending.add({ n: 1, changes: [labels("c", "x", "y")] });
    pending.add({ n: 2, changes: [labels("c", "x"), history("c", "m")] });
    expect(pending.has(labelCell("c", "x"))).toBe(true);
    expect(pending.has(historyCell("c", "m"))).toBe(true);
    expect(pending.has(labelCell("c", "m"))).toBe(false);
    expect(pending.has(labelCell("d", "x"))).toBe(false);
    pending.confirm(1);
    expect(pending.has(labelCell("c", "y"))).toBe(false);
    expect(pending.has(labelCell("c", "x"))).toBe(true);
    pending.confirm(2);
    expect(pending.has(labelCell("c", "x"))).toBe(false);
    expect(pending.size).toBe(0);
  });

  test("confirming a batch places every earlier one too; confirming again changes nothing", () => {
    const pending = new PendingChanges();
    for (let n = 1; n <= 5; n++) pending.add({ n, changes: [labels("c", `k${n}`)] });
    pending.confirm(3);
    expect(pending.pending().map((b) => b.n)).toEqual([4, 5]);
    pending.confirm(3);
    pending.confirm(2);
    expect(pending.pending().map((b) => b.n)).toEqual([4, 5]);
  });

  test("an own reset is pending until it comes back", () => {
    const pending = new PendingChanges();
    pending.add({ n: 1, changes: [reset, labels("c", "x")] });
    expect(pending.resetPending).toBe(true);
    pending.confirm(1);
    expect(pending.resetPending).toBe(false);
  });

  test("batch numbers must grow", () => {
    const pending = new PendingChanges();
    pending.add({ n: 2, changes: [] });
    expect(() => pending.add({ n: 2, changes: [] })).toThrow(RangeError);
  });
});
