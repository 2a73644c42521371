import { describe, expect, test } from "bun:test";
import { statusFigures, type StatusFigures } from "../../../src/server/statusPage/statusFigures.ts";
import { StatusHistory } from "../../../src/server/statusPage/statusHistory.ts";
import { sleep } from "../../../src/runtime/sleep.ts";

const figures = (cached: number): StatusFigures => statusFigures({ prompt_tokens: cached * 2, prefix_hit_tokens: cached });

describe("StatusHistory", () => {
  test("without a timer: one sample at track and one at each read, the last `capacity` kept", () => {
    let clock = 1000;
    let cached = 0;
    const history = new StatusHistory({ capacity: 3, now: () => clock });
    expect(history.current()).toEqual([]); // nothing tracked yet
    history.track(() => figures(cached));
    // Samples at 1000 (track), then 1500, 2000, 2500, 3000 (reads): the last three remain.
    let samples = history.current();
    for (let i = 1; i <= 4; i++) {
      clock += 500;
      cached += 10;
      samples = history.current();
    }
    expect(samples.map((sample) => sample.time_ms)).toEqual([2000, 2500, 3000]);
    expect(samples.map((sample) => sample.figures.cached_tokens)).toEqual([20, 30, 40]);
  });

  test("with a timer: samples every everyMs until stopped", async () => {
    let reads = 0;
    const history = new StatusHistory({ capacity: 100, everyMs: 20 });
    history.track(() => {
      reads++;
      return figures(reads);
    });
    await sleep(130);
    history.stop();
    const taken = history.current().length;
    expect(taken).toBeGreaterThanOrEqual(2); // one at track, then the timer (a loaded machine delays it)
    expect(taken).toBe(reads);
    await sleep(60);
    expect(history.current().length).toBe(taken); // stopped: no more samples
    expect(history.current().map((sample) => sample.figures.cached_tokens)).toEqual(Array.from({ length: taken }, (_, i) => i + 1));
  });

  test("a failing read skips its sample and is reported once until a read works again", () => {
    const errors: unknown[] = [];
    let broken = true;
    const history = new StatusHistory({ onError: (error) => errors.push(error) });
    history.track(() => {
      if (broken) throw new Error("stats failed");
      return figures(1);
    });
    expect(history.current()).toEqual([]);
    expect(errors).toHaveLength(1);
    broken = false;
    expect(history.current()).toHaveLength(1);
    broken = true;
    history.current();
    expect(errors.map((error) => (error as Error).message)).toEqual(["stats failed", "stats failed"]);
  });

  test("a sample interval that is not positive is refused", () => {
    expect(() => new StatusHistory({ everyMs: 0 })).toThrow("sample interval must be positive, got 0 ms");
  });
});
