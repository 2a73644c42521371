import { describe, expect, test } from "bun:test";
import { cacheAwareOrder, type QueuedPrefill } from "../../src/kv/cacheAwareOrder.ts";

const q = (newChunks: string[], cachedChunks: string[] = [], loadTokens = 0, computeTokens = 10): QueuedPrefill => ({ newChunks, cachedChunks, loadTokens, computeTokens });

describe("cacheAwareOrder", () => {
  test("first come first served when nothing is shared", () => {
    expect(cacheAwareOrder([q(["a"]), q(["b"]), q(["c"])])).toEqual({ admit: [0, 1, 2], deferred: [] });
  });

  test("a request needing a chunk an earlier one computes is deferred (delay hit), also for chunks in flight", () => {
    expect(cacheAwareOrder([q(["a", "b"]), q(["c"]), q(["b"])])).toEqual({ admit: [0, 1], deferred: [2] });
    expect(cacheAwareOrder([q(["x"]), q(["y"])], { inFlight: (h) => h === "x" })).toEqual({ admit: [1], deferred: [0] });
  });

  test("bundle hits follow the request they share a cached chunk with", () => {
    const order = cacheAwareOrder([q([], ["k"]), q(["n1"]), q([], ["z"]), q(["n2"], ["k"])]);
    expect(order.admit).toEqual([0, 3, 1, 2]);
  });

  test("loading-bound requests are deprioritised but keep their order; the queue's first always goes first", () => {
    const heavy = (id: string) => q([], [id], 1000, 1);
    // h0 goes first; h1 would make the batch load 2000 for compute 2 (> 5×): deprioritised; c1 brings
    // compute (1000 / 501), then h2 fits (2000 / 502) and c2; h1 comes last.
    const order = cacheAwareOrder([heavy("h0"), heavy("h1"), q(["c1"], [], 0, 500), heavy("h2"), q(["c2"], [], 0, 500)], { loadBoundRatio: 5 });
    expect(order.admit).toEqual([0, 2, 3, 4, 1]);
  });
});
