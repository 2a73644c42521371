/**
 * The order of KV event batches, step by step: waiting for late batches, one replay per gap
 * (never a loop), gaps the replay cannot fill, duplicates against restarts, reconnects, and the
 * bound on batches held.
 */
import { describe, expect, test } from "bun:test";
import { KvEventSequencer, type SequencerOptions } from "../../src/proxy/kvEventSequencer.ts";

const payload = (seq: number, generation = 0) => Uint8Array.of(seq & 0xff, generation);
const big = (seq: number | bigint) => BigInt(seq);

/** A sequencer whose actions are written down as short strings; batches in `unusable` are declared so when applied. */
function recorded(options: SequencerOptions, unusable = new Set<number>()) {
  const log: string[] = [];
  const sequencer: KvEventSequencer = new KvEventSequencer(
    {
      apply: (seq, bytes, replayed) => {
        log.push(`${replayed ? "replayed" : "apply"} ${seq}${bytes[1] ? `/${bytes[1]}` : ""}`);
        if (unusable.has(Number(seq))) sequencer.unusable();
      },
      resync: (reason) => log.push(`resync ${reason}`),
      gapSeen: (from) => log.push(`gap ${from}`),
      requestReplay: (from) => log.push(`replay ${from}`),
      cancelReplay: () => log.push("cancel"),
      gapRecovered: (from, to) => log.push(`recovered ${from}-${to}`),
      duplicate: (seq) => log.push(`duplicate ${seq}`),
    },
    options,
  );
  const live = (...seqs: number[]) => seqs.forEach((seq) => sequencer.live(big(seq), payload(seq)));
  const replayed = (...seqs: number[]) => seqs.forEach((seq) => sequencer.replayed(big(seq), payload(seq)));
  const take = () => log.splice(0);
  return { sequencer, live, replayed, take };
}

/** A sequencer with a replay socket, through its first connection's replay of batches 0..n-1. */
function caughtUp(n: number, options: Partial<SequencerOptions> = {}) {
  const s = recorded({ replay: true, ...options });
  s.sequencer.connected();
  s.replayed(...Array.from({ length: n }, (_, i) => i));
  s.sequencer.replayEnded();
  s.take();
  return s;
}

describe("KvEventSequencer", () => {
  test("a connection asks for the whole replay buffer first; live batches meanwhile wait and apply after it, copies ignored", () => {
    const { sequencer, live, replayed, take } = recorded({ replay: true });
    sequencer.connected();
    expect(take()).toEqual(["replay 0"]);
    live(2, 3);
    replayed(0, 1, 2);
    sequencer.replayEnded();
    expect(take()).toEqual(["replayed 0", "replayed 1", "replayed 2", "apply 3"]);
    live(4);
    expect(take()).toEqual(["apply 4"]);
    expect(sequencer.next).toBe(5n);
  });

  test("a subscriber that starts after the engine without replay follows from the first batch it gets", () => {
    const { sequencer, live, take } = recorded({ replay: false });
    sequencer.connected();
    live(7, 8);
    expect(take()).toEqual(["apply 7", "apply 8"]);
  });

  test("out of order within the wait: the late batch fills the gap, no replay", () => {
    const { sequencer, live, take } = caughtUp(1);
    live(2, 3);
    expect(take()).toEqual(["gap 1"]);
    live(1);
    expect(take()).toEqual(["apply 1", "apply 2", "apply 3"]);
    sequencer.gapTimeout();
    expect(take()).toEqual([]);
  });

  test("a lost batch comes back through replay; its late live copy is a duplicate", () => {
    const { sequencer, live, replayed, take } = caughtUp(2);
    live(3);
    sequencer.gapTimeout();
    expect(take()).toEqual(["gap 2", "replay 2"]);
    live(4);
    replayed(2, 3);
    sequencer.replayEnded();
    expect(take()).toEqual(["replayed 2", "replayed 3", "recovered 2-2", "apply 4"]);
    live(3);
    expect(take()).toEqual(["duplicate 3"]);
  });

  test("batches the replay buffer no longer has: resync, then on from what it has", () => {
    const { sequencer, live, replayed, take } = caughtUp(3);
    live(9);
    sequencer.gapTimeout();
    replayed(6, 7, 8, 9);
    sequencer.replayEnded();
    expect(take()).toEqual(["gap 3", "replay 3", "resync gap", "replayed 6", "replayed 7", "replayed 8", "replayed 9"]);
  });

  test("one replay per gap: a gap still open after the replay ends resynchronises instead of asking again", () => {
    const { sequencer, live, take } = caughtUp(1);
    live(5);
    sequencer.gapTimeout();
    sequencer.replayEnded();
    expect(take()).toEqual(["gap 1", "replay 1", "resync gap", "apply 5"]);
  });

  test("a replay without an answer is given up: resync, on from the batches held", () => {
    const { sequencer, live, take } = caughtUp(1);
    live(3, 4);
    sequencer.gapTimeout();
    sequencer.replayFailed();
    expect(take()).toEqual(["gap 1", "replay 1", "resync replay-failed", "apply 3", "apply 4"]);
    sequencer.replayEnded();
    sequencer.replayed(5n, payload(5));
    expect(take()).toEqual([]);
  });

  test("without a replay socket a gap that stays open resynchronises", () => {
    const { sequencer, live, take } = recorded({ replay: false });
    sequencer.connected();
    live(0, 1, 4, 5);
    sequencer.gapTimeout();
    expect(take()).toEqual(["apply 0", "apply 1", "gap 2", "resync gap", "apply 4", "apply 5"]);
  });

  test("a sequence that goes backwards with other payloads is a restart: resync, and the new sequence from its start", () => {
    const { sequencer, take } = caughtUp(5);
    sequencer.live(0n, payload(0, 1));
    sequencer.live(1n, payload(1, 1));
    expect(take()).toEqual(["resync restart", "apply 0/1", "apply 1/1"]);
    // Joined mid-way: the new sequence's first batches are asked for.
    sequencer.live(0n, payload(0, 2));
    sequencer.live(3n, payload(3, 2));
    expect(take()).toEqual(["resync restart", "apply 0/2", "gap 1"]);
  });

  test("without replay a restart follows the new sequence from wherever it is", () => {
    const { sequencer, live, take } = recorded({ replay: false });
    sequencer.connected();
    live(10, 11);
    sequencer.live(2n, payload(2, 1));
    expect(take()).toEqual(["apply 10", "apply 11", "resync restart", "apply 2/1"]);
  });

  test("a reconnect resynchronises (when something was applied) and asks for the buffer again", () => {
    const { sequencer, live, take } = recorded({ replay: true });
    sequencer.connected();
    sequencer.connected();
    expect(take()).toEqual(["replay 0", "cancel", "replay 0"]);
    sequencer.replayed(0n, payload(0));
    sequencer.replayEnded();
    live(1);
    sequencer.connected();
    expect(take()).toEqual(["replayed 0", "apply 1", "resync reconnect", "replay 0"]);
  });

  test("too many batches held gives the gap up", () => {
    const { sequencer, live, take } = caughtUp(1, { maxPending: 3 });
    live(2, 3, 4);
    expect(take()).toEqual(["gap 1"]);
    live(5);
    expect(take()).toEqual(["resync overflow", "apply 2", "apply 3", "apply 4", "apply 5"]);
    sequencer.gapTimeout();
    expect(take()).toEqual([]);
  });

  test("held bytes are bounded too, and so is a replay that keeps batches held", () => {
    const { sequencer, live, take } = caughtUp(1, { maxPendingBytes: 5 });
    live(3);
    sequencer.gapTimeout();
    live(4, 5);
    expect(take()).toEqual(["gap 1", "replay 1", "cancel", "resync overflow", "apply 3", "apply 4", "apply 5"]);
  });

  test("an unusable batch resynchronises; one that follows it, or comes first, has no view to drop", () => {
    const { sequencer, live, take } = recorded({ replay: false }, new Set([0, 2, 3]));
    sequencer.connected();
    live(0, 1, 2, 3, 4, 5);
    expect(take()).toEqual(["apply 0", "apply 1", "apply 2", "resync malformed", "apply 3", "apply 4", "apply 5"]);
    live(3);
    expect(take()).toEqual(["duplicate 3"]);
  });

  test("sequence numbers are unsigned 64-bit: they follow on up to 2^64-1, and duplicates are told by digest", () => {
    const top = (1n << 64n) - 1n;
    const { sequencer, take } = recorded({ replay: false });
    sequencer.connected();
    for (const seq of [top - 2n, top - 1n, top]) sequencer.live(seq, payload(Number(seq & 0xffn)));
    expect(take()).toEqual([`apply ${top - 2n}`, `apply ${top - 1n}`, `apply ${top}`]);
    expect(sequencer.next).toBe(1n << 64n);
    sequencer.live(top - 1n, payload(Number((top - 1n) & 0xffn)));
    expect(take()).toEqual([`duplicate ${top - 1n}`]);
    // Same number, other bytes: a restart, not a copy.
    sequencer.live(top - 1n, payload(Number((top - 1n) & 0xffn), 9));
    expect(take()).toEqual(["resync restart", `apply ${top - 1n}/9`]);
  });
});
