/** Shared-log entries and snapshots are checked whole before any of them is applied. */
import { describe, expect, test } from "bun:test";
import { decodeLogEntry, decodeSnapshot } from "../../src/state/sharedLogSchema.ts";

const insert = { c: "service", r: { op: "insert", id: "r1", keys: ["a", "b"], tokens: [3, 4], at: 1 } };
const fields = (changes: unknown, extra: Partial<Record<"o" | "f" | "n", string>> = {}) => ["o", extra.o ?? "host-1", "f", extra.f ?? "1", "n", extra.n ?? "1", "d", typeof changes === "string" ? changes : JSON.stringify(changes)];

describe("decodeLogEntry", () => {
  test("a ctxr change batch decodes", () => {
    const decoded = decodeLogEntry("5-0", fields([insert, { c: "history", conversation: "c", messages: [["k", { role: "user" }]] }, { c: "service", r: { op: "reset" } }]));
    expect(decoded.ok).toBe(true);
    if (decoded.ok) expect(decoded.entry).toMatchObject({ id: "5-0", origin: "host-1", first: 1, n: 1, changes: [insert, expect.anything(), expect.anything()] });
  });

  test("garbage is a dead letter naming what is wrong, with its id", () => {
    const cases: [unknown[], RegExp][] = [
      [["foo", "bar"], /lacks the fields.*"foo"/],
      [fields("{not json"), /not JSON/],
      [fields({ c: "service" }), /not ctxr changes/],
      [fields([insert], { f: "2", n: "1" }), /batch numbers/],
      [fields([insert], { n: "1e3" }), /batch numbers/],
      [fields([insert], { o: "" }), /lacks the fields/],
    ];
    for (const [raw, reason] of cases) {
      const decoded = decodeLogEntry("7-1", raw);
      expect(decoded.ok).toBe(false);
      if (!decoded.ok) {
        expect(decoded.dead.id).toBe("7-1");
        expect(decoded.dead.reason).toMatch(reason);
      }
    }
  });

  test("the reader's own entries are recognised by their fields without parsing their changes; others' still are checked whole", () => {
    const own = decodeLogEntry("9-0", fields("{not json", { o: "me", f: "3", n: "4" }), "me");
    expect(own).toEqual({ ok: true, entry: { id: "9-0", origin: "me", first: 3, n: 4, changes: [] } });
    expect(decodeLogEntry("9-1", fields("{not json", { o: "someone-else" }), "me").ok).toBe(false);
    expect(decodeLogEntry("9-2", fields("{not json", { o: "me" })).ok).toBe(false);
    // The fields themselves are still checked for the reader's own entries.
    const badNumbers = decodeLogEntry("9-3", fields([insert], { o: "me", f: "2", n: "1" }), "me");
    expect(badNumbers.ok).toBe(false);
  });

  test("a type-confused change anywhere fails the whole entry (nothing of it is used)", () => {
    const confused = [
      [insert, { c: "service", r: { op: "insert", id: "r2", keys: "ab", tokens: [1], at: 1 } }],
      [insert, { c: "service", r: { op: "insert", id: "r2", keys: ["a", "b"], tokens: [1], at: 1 } }],
      [insert, { c: "service", r: { op: "insert", id: "r2", keys: ["a", "a"], tokens: [1, 1], at: 1 } }],
      [insert, { c: "service", r: { op: "remove", ids: [7] } }],
      [insert, { c: "service", r: { op: "conversation", conversation: "c", entries: [["k", 5]] } }],
      [insert, { c: "history", conversation: 5, messages: [] }],
      [insert, { c: "service", r: { op: "reset", extra: true } }],
    ];
    for (const changes of confused) expect(decodeLogEntry("8-0", fields(changes)).ok).toBe(false);
  });
});

describe("decodeSnapshot", () => {
  const good = { id: "3-0", state: { version: 1, service: { version: 1, contexts: [["r", ["a"], [2], 5]], conversations: [["c", [["a", "Doc 1"]]]] }, histories: [["c", [["k", "x"]]]] } };

  test("a snapshot decodes; garbage says why", () => {
    expect(decodeSnapshot(JSON.stringify(good)).id).toBe("3-0");
    expect(() => decodeSnapshot("garbage")).toThrow(/not JSON/);
    expect(() => decodeSnapshot(JSON.stringify({ ...good, id: "x" }))).toThrow(/not a ctxr state snapshot/);
    expect(() => decodeSnapshot(JSON.stringify({ ...good, state: { ...good.state, version: 2 } }))).toThrow(/not a ctxr state snapshot/);
    const mismatched = structuredClone(good);
    mismatched.state.service.contexts[0]![2] = [1, 2];
    expect(() => decodeSnapshot(JSON.stringify(mismatched))).toThrow(/keys and tokens/);
  });
});
