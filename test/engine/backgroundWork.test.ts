/** BackgroundWork (src/engine/backgroundWork.ts): the queue and each kind's accounting, on a hand-driven clock. */
import { describe, expect, test } from "bun:test";
import { BackgroundWork, type BackgroundJob } from "../../src/engine/backgroundWork.ts";

function job(kind: string, body: () => "done" | "dropped", clock?: { t: number }, ms = 0): BackgroundJob {
  return {
    kind,
    run: async () => {
      if (clock !== undefined) clock.t += ms;
      return body();
    },
  };
}

describe("BackgroundWork", () => {
  test("runs jobs first in, first out, and accounts each kind: run, dropped, failed, deferred, runner seconds", async () => {
    const clock = { t: 0 };
    const lines: string[] = [];
    const work = new BackgroundWork(1, { now: () => clock.t, log: (line) => lines.push(line) });
    const order: string[] = [];
    work.enqueue(job("a", () => (order.push("a1"), "done"), clock, 500));
    work.enqueue(job("b", () => (order.push("b1"), "dropped")));
    work.defer();
    work.enqueue(job("a", () => { throw new Error("boom"); }));
    work.defer();
    work.defer();
    expect(work.pending).toBe(3);
    expect(work.stats.kinds.a!.deferred).toBe(2);
    expect(work.stats.kinds.b!.deferred).toBe(1);
    for (let i = 0; i < 3; i++) await work.runNext();
    expect(order).toEqual(["a1", "b1"]);
    expect(work.stats.kinds.a).toEqual({ pending: 0, run: 1, deferred: 2, dropped: 0, failed: 1, runnerSeconds: 0.5 });
    expect(work.stats.kinds.b).toEqual({ pending: 0, run: 0, deferred: 1, dropped: 1, failed: 0, runnerSeconds: 0 });
    expect(lines).toEqual(["ctxr: background a job failed: boom"]);
  });

  test("the budget holds the next piece back after a long one", async () => {
    const clock = { t: 0 };
    const work = new BackgroundWork(0.1, { now: () => clock.t, windowMs: 1000 });
    work.enqueue(job("a", () => "done", clock, 300));
    work.enqueue(job("a", () => "done", clock, 10));
    expect(work.waitMs()).toBe(0);
    await work.runNext();
    expect(work.waitMs()).toBeGreaterThan(0);
    clock.t += 1000;
    expect(work.waitMs()).toBe(0);
  });

  test("a budget of 0 refuses every job; a full queue drops the newest; clear drops the waiting ones", () => {
    const off = new BackgroundWork(0);
    expect(off.enabled).toBe(false);
    expect(off.enqueue(job("a", () => "done"))).toBe(false);
    expect(off.stats.kinds.a!.dropped).toBe(1);
    const small = new BackgroundWork(0.5, { maxPending: 2 });
    expect([1, 2, 3].map(() => small.enqueue(job("a", () => "done")))).toEqual([true, true, false]);
    small.clear();
    expect(small.stats.kinds.a).toMatchObject({ pending: 0, dropped: 3 });
  });

  test("idle() resolves once no job waits or runs", async () => {
    const work = new BackgroundWork(1);
    await work.idle();
    let release = () => {};
    work.enqueue({ kind: "a", run: () => new Promise((resolve) => (release = () => resolve("done"))) });
    let idle = false;
    const waiting = work.idle().then(() => (idle = true));
    const running = work.runNext();
    await Promise.resolve();
    expect(idle).toBe(false);
    release();
    await running;
    await waiting;
    expect(idle).toBe(true);
  });
});
