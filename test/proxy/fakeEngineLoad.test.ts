/**
 * The fake engine's load model (test/helpers/fakeEngine/engineLoad.ts): the step arithmetic on a
 * virtual clock, then the engine in real time (requests in flight slow each other; a stream's
 * chunks follow the generated tokens).
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { cleanupAfterEach } from "../helpers/testLifecycle.ts";
import { LoadSchedule, type EngineLoadCosts } from "../helpers/fakeEngine/engineLoad.ts";
import { FakeEngine } from "../helpers/fakeEngine/fakeEngine.ts";

setDefaultTimeout(30_000);

const cleanup = cleanupAfterEach();

const costs: EngineLoadCosts = { stepMs: 1, prefillMsPerToken: 0.01, kvMsPerToken: 0.001, maxBatchedTokens: 8192 };

/** Runs the schedule to the end on a virtual clock: per id, the time of each generated token. */
function simulate(schedule: LoadSchedule, arrivals: [at: number, id: number, prompt: number, output: number][]) {
  const times = new Map<number, number[]>();
  const pending = [...arrivals].sort((a, b) => a[0] - b[0]);
  let clock = 0;
  const arrive = () => {
    while (pending.length > 0 && pending[0]![0] <= clock) {
      const [, id, prompt, output] = pending.shift()!;
      schedule.submit(id, prompt, output);
      times.set(id, []);
    }
  };
  const steps: number[] = [];
  while (pending.length > 0 || !schedule.idle) {
    arrive();
    const step = schedule.plan();
    if (step === null) {
      clock = pending[0]![0];
      continue;
    }
    clock += step.ms;
    steps.push(step.ms);
    for (const [id] of schedule.finish().tokens) times.get(id)!.push(clock);
  }
  return { times, steps, clock };
}

describe("LoadSchedule (virtual clock)", () => {
  test("alone: a prefill step (base + its uncached tokens), then one decode step per token over its growing KV", () => {
    const { times, steps } = simulate(new LoadSchedule(costs, () => 1000), [[0, 1, 1000, 3]]);
    expect(steps).toEqual([1 + 10, 1 + 0.001 * 1001, 1 + 0.001 * 1002]);
    expect(times.get(1)!.map((t) => +t.toFixed(6))).toEqual([11, 13.001, 15.003]);
  });

  test("the cache is looked up once, when the prefill is first scheduled; a cached prompt still computes its last token", () => {
    const admitted: [number, number][] = [];
    let clock = 0;
    const schedule = new LoadSchedule(costs, (id) => {
      admitted.push([id, clock]);
      return id === 1 ? 500 : 0;
    });
    schedule.submit(1, 500, 1);
    schedule.submit(2, 500, 1);
    expect(admitted).toEqual([]);
    // Budget 8192 holds both: one step, both admitted then; the fully cached one costs 1 token.
    const step = schedule.plan()!;
    expect(admitted).toEqual([[1, 0], [2, 0]]);
    expect(step.prefilling).toEqual([[1, 500], [2, 1]]);
    expect(step.ms).toBeCloseTo(1 + 0.01 * 501, 9);
    clock = step.ms;
    expect(schedule.finish()).toEqual({ tokens: [[1, 1], [2, 1]], finished: [1, 2] });
    expect(schedule.idle).toBe(true);
    expect(schedule.plan()).toBeNull();
  });

  test("prefill is chunked by the batch budget, first come first served, decode tokens taking their share first", () => {
    const small = { ...costs, maxBatchedTokens: 1000 };
    const schedule = new LoadSchedule(small, () => 1500);
    schedule.submit(1, 1500, 2);
    schedule.submit(2, 1500, 2);
    expect(schedule.plan()!.prefilling).toEqual([[1, 1000]]);
    expect(schedule.finish().tokens).toEqual([]);
    expect(schedule.plan()!.prefilling).toEqual([[1, 500], [2, 500]]);
    expect(schedule.finish().tokens).toEqual([[1, 1]]);
    // 1 decodes (one token of the budget), 2 gets the other 999, of which it needs 1000.
    const third = schedule.plan()!;
    expect(third.decoding).toEqual([1]);
    expect(third.prefilling).toEqual([[2, 999]]);
    expect(third.ms).toBeCloseTo(1 + 0.01 * 999 + 0.001 * 1501, 9);
    expect(schedule.finish()).toEqual({ tokens: [[1, 2]], finished: [1] });
    expect(schedule.plan()!.prefilling).toEqual([[2, 1]]);
    expect(schedule.finish().tokens).toEqual([[2, 1]]);
    expect(schedule.plan()!.decoding).toEqual([2]);
    expect(schedule.finish()).toEqual({ tokens: [[2, 2]], finished: [2] });
    expect(schedule.idle).toBe(true);
  });

  test("requests in flight slow each other: a second request delays the first's tokens and both take longer than alone", () => {
    const alone = simulate(new LoadSchedule(costs, () => 2000), [[0, 1, 2000, 20]]);
    const shared = simulate(new LoadSchedule(costs, () => 2000), [[0, 1, 2000, 20], [5, 2, 2000, 20]]);
    const end = (r: typeof alone, id: number) => r.times.get(id)!.at(-1)!;
    // The second's prefill (20 ms) lands in one of the first's decode steps.
    expect(end(shared, 1)).toBeGreaterThan(end(alone, 1) + 20);
    expect(end(shared, 2) - 5).toBeGreaterThan(end(alone, 1));
    // The work is done once: the makespan is less than the two requests one after another.
    expect(shared.clock).toBeLessThan(2 * alone.clock);
    // Batched decode steps read both sequences' KV.
    expect(Math.max(...shared.steps.slice(-5))).toBeGreaterThan(Math.max(...alone.steps.slice(-5)));
  });

  test("a step must be finished before the next is planned, and ids are unique", () => {
    const schedule = new LoadSchedule(costs, () => 10);
    schedule.submit(1, 10, 1);
    expect(() => schedule.submit(1, 10, 1)).toThrow("twice");
    schedule.plan();
    expect(() => schedule.plan()).toThrow("not finished");
    schedule.finish();
    expect(() => schedule.finish()).toThrow("no step planned");
  });
});

describe("FakeEngine with the load model", () => {
  async function engine(load: Partial<EngineLoadCosts> | null): Promise<FakeEngine> {
    const started = await FakeEngine.start({ blockSize: 4, load });
    cleanup(() => started.close());
    return started;
  }

  const prompt = (i: number) => `request ${i}: ${"lorem ipsum dolor sit amet ".repeat(20)}`;

  async function timed(url: string, body: Record<string, unknown>) {
    const started = performance.now();
    const response = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const chunkTimes: number[] = [];
    let text = "";
    const decoder = new TextDecoder();
    for await (const chunk of response.body!) {
      chunkTimes.push(performance.now() - started);
      text += decoder.decode(chunk, { stream: true });
    }
    return { first: chunkTimes[0]!, end: performance.now() - started, chunkTimes, text };
  }

  test("prefills queue: the second of two simultaneous requests waits for the first's prefill; decode steps pace the stream", async () => {
    // 100-odd prompt tokens at 1 ms each: ~100 ms of prefill; 6 answer tokens at 15 ms a step.
    const fake = await engine({ stepMs: 15, prefillMsPerToken: 1, kvMsPerToken: 0, maxBatchedTokens: 64 });
    const tokens = fake.promptIds(prompt(0)).length;
    const answerTokens = fake.promptIds("This is the fake engine's answer.").length;
    expect(tokens).toBeGreaterThan(100);
    const body = (i: number) => ({ prompt: prompt(i), stream: true, stream_options: { include_usage: true } });
    const [a, b] = await Promise.all([timed(fake.url, body(1)), timed(fake.url, body(2))]);
    const prefillSteps = Math.ceil(tokens / 64);
    // The first token of either comes after its prefill; the later one after both prefills.
    expect(Math.min(a.first, b.first)).toBeGreaterThanOrEqual(tokens * 1 + prefillSteps * 15 - 5);
    expect(Math.max(a.first, b.first)).toBeGreaterThanOrEqual(2 * tokens + 2 * prefillSteps * 15 - 5);
    // The stream takes its decode steps: at least (answer tokens − 1) steps after the first token.
    for (const r of [a, b]) expect(r.end - r.first).toBeGreaterThanOrEqual((answerTokens - 1) * 15 - 5);
    expect(a.text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(a.chunkTimes.length).toBeGreaterThan(2);
    expect(fake.stats).toEqual({ requests: 2, promptTokens: 2 * tokens, cachedTokens: 0 });
  });

  test("cached tokens shorten the prefill and are reported; a whole (not streamed) answer comes with the last token", async () => {
    const fake = await engine({ stepMs: 2, prefillMsPerToken: 2, kvMsPerToken: 0, maxBatchedTokens: 8192 });
    const tokens = fake.promptIds(prompt(0)).length;
    const cold = await timed(fake.url, { prompt: prompt(0) });
    expect(cold.first).toBeGreaterThanOrEqual(2 * tokens - 5);
    const warm = await timed(fake.url, { prompt: prompt(0) });
    const usage = JSON.parse(warm.text).usage;
    expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(tokens - 8);
    expect(warm.first).toBeLessThan(cold.first / 2);
    expect(JSON.parse(cold.text).choices[0].text).toBe("This is the fake engine's answer.");
    expect(fake.stats.requests).toBe(2);
  });

  test("off by default: simultaneous requests do not wait for each other", async () => {
    const fake = await FakeEngine.start({ blockSize: 4, prefillMsPerToken: 1 });
    cleanup(() => fake.close());
    const tokens = fake.promptIds(prompt(0)).length;
    const [a, b] = await Promise.all([timed(fake.url, { prompt: prompt(1) }), timed(fake.url, { prompt: prompt(2) })]);
    expect(Math.max(a.end, b.end)).toBeLessThan(2 * tokens);
  });
});
