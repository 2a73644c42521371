import { describe, expect, test } from "bun:test";
import { JournalError } from "../../../src/online/journal/errors.ts";
import { parseFrames } from "../../../src/online/journal/framing.ts";
import { GroupCommitQueue } from "../../../src/online/journal/groupCommit.ts";

/** A sink that records each batch's frames and completes when the test says so. */
function controlledSink() {
  const batches: number[][] = [];
  const waiting: { resolve: () => void; reject: (error: Error) => void }[] = [];
  const sink = (bytes: Uint8Array, length: number) => {
    batches.push(parseFrames(bytes.slice(0, length)).frames.map((frame) => frame.seq));
    return new Promise<void>((resolve, reject) => waiting.push({ resolve, reject }));
  };
  const tick = () => new Promise((resolve) => setTimeout(resolve, 1));
  return {
    batches,
    sink,
    /** Completes the oldest pending sink call. */
    async complete() {
      while (waiting.length === 0) await tick();
      waiting.shift()!.resolve();
      await tick();
    },
    async fail(message: string) {
      while (waiting.length === 0) await tick();
      waiting.shift()!.reject(new Error(message));
      await tick();
    },
    get pending() {
      return waiting.length;
    },
  };
}

function settled(promise: Promise<unknown>) {
  const state = { done: false, error: null as unknown };
  promise.then(
    () => (state.done = true),
    (error) => {
      state.done = true;
      state.error = error;
    },
  );
  return state;
}

describe("group commit", () => {
  test("appends made together share one write, in call order; appends during a write form the next batch", async () => {
    const io = controlledSink();
    const queue = new GroupCommitQueue(io.sink);
    const first = [1, 2, 3].map((seq) => settled(queue.append(seq, JSON.stringify({ seq }))));
    await new Promise((resolve) => setTimeout(resolve, 1));
    expect(io.batches).toEqual([[1, 2, 3]]);
    // While batch 1 is being written:
    const second = [4, 5].map((seq) => settled(queue.append(seq, "null")));
    await new Promise((resolve) => setTimeout(resolve, 1));
    expect(io.batches.length).toBe(1);
    expect(first.some((s) => s.done)).toBe(false);
    await io.complete();
    expect(first.every((s) => s.done && s.error === null)).toBe(true);
    expect(second.some((s) => s.done)).toBe(false);
    expect(io.batches).toEqual([[1, 2, 3], [4, 5]]);
    await io.complete();
    expect(second.every((s) => s.done && s.error === null)).toBe(true);
    expect(queue.stats).toMatchObject({ batches: 2, records: 5 });
    await queue.drained();
  });

  test("a task runs after earlier appends are durable and before later ones are written", async () => {
    const io = controlledSink();
    const queue = new GroupCommitQueue(io.sink);
    const events: string[] = [];
    queue.append(1, "1").then(() => events.push("append 1"));
    const task = queue.enqueueTask(async () => {
      events.push(`task: ${io.batches.length} batch(es) written, ${io.pending} in flight`);
      return "result";
    });
    queue.append(2, "2").then(() => events.push("append 2"));
    await io.complete();
    expect(await task).toBe("result");
    await io.complete();
    await queue.drained();
    expect(events).toContain("task: 1 batch(es) written, 0 in flight");
    expect(events.indexOf("append 2")).toBeGreaterThan(events.indexOf("append 1"));
    expect(io.batches).toEqual([[1], [2]]);
  });

  test("a failed write rejects its batch and everything after, and poisons the queue", async () => {
    const io = controlledSink();
    const queue = new GroupCommitQueue(io.sink);
    const ok = settled(queue.append(1, "1"));
    await io.complete();
    const failing = settled(queue.append(2, "2"));
    await new Promise((resolve) => setTimeout(resolve, 1));
    const queuedBehind = settled(queue.append(3, "3"));
    const taskBehind = settled(queue.enqueueTask(async () => "never"));
    await io.fail("EIO: disk on fire");
    expect(ok).toEqual({ done: true, error: null });
    for (const state of [failing, queuedBehind, taskBehind]) {
      expect(state.done).toBe(true);
      expect(state.error).toBeInstanceOf(JournalError);
      expect(String(state.error)).toContain("EIO: disk on fire");
      expect(String(state.error)).toContain("refuses further appends");
    }
    expect(queue.failure).toBeInstanceOf(JournalError);
    expect(queue.append(4, "4")).rejects.toThrow("refuses further appends");
    expect(queue.enqueueTask(async () => 1)).rejects.toThrow("refuses further appends");
    expect(io.batches).toEqual([[1], [2]]); // nothing written after the failure
    expect(io.pending).toBe(0);
    await queue.drained();
  });

  test("a failed task poisons the queue too", async () => {
    const queue = new GroupCommitQueue(async () => {});
    await expect(queue.enqueueTask(async () => Promise.reject(new Error("ENOSPC")))).rejects.toThrow("ENOSPC");
    await expect(queue.append(1, "1")).rejects.toThrow("refuses further appends");
  });

  test("drained() waits for the queue to empty", async () => {
    const io = controlledSink();
    const queue = new GroupCommitQueue(io.sink);
    queue.append(1, "1");
    const drained = settled(queue.drained());
    await new Promise((resolve) => setTimeout(resolve, 1));
    expect(drained.done).toBe(false);
    await io.complete();
    expect(drained.done).toBe(true);
  });
});
