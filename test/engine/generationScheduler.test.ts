/**
 * Continuous batching (GenerationScheduler) and the KV block bookkeeping
 * (KvBlockPool) on the real CPU runner with the tiny model of the reference
 * fixture: greedy tokens equal the PyTorch reference, concurrent requests decode
 * together, chunked prefill and preemption do not change greedy outputs, stop
 * strings / eos / max_tokens, cancellation frees blocks, too-long prompts are
 * refused, a runner crash fails the running requests and the next one succeeds.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { DeadlineExceededError, GenerationFailedError, PromptTooLongError, QueueFullError } from "../../src/engine/generationErrors.ts";
import { GenerationScheduler } from "../../src/engine/generationScheduler.ts";
import type { GenerationRequest } from "../../src/engine/generationTypes.ts";
import { KvBlockPool, KvBlockTable, KvCacheFullError, blocksFor } from "../../src/kv/kvBlockTable.ts";
import { loadModelTokenizer, type ModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { TINY_REFERENCE, buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

let executable = "";
let model: { path: string; cleanup(): void };
let tokenizer: ModelTokenizer;
const runners: RunnerProcess[] = [];

beforeAll(async () => {
  executable = buildRunner();
  model = tinyModelFolder();
  tokenizer = await loadModelTokenizer(model.path);
}, 300_000);

afterAll(async () => {
  for (const runner of runners) await runner.shutdown();
  model?.cleanup();
});

async function startRunner(blocks: number, blockSize = 16): Promise<RunnerProcess> {
  const runner = await RunnerProcess.start({ executable, model: model.path, blocks, blockSize, threads: 2 });
  runners.push(runner);
  return runner;
}

const GREEDY = { temperature: 0, topP: 1, topK: 0 };
const request = (promptIds: readonly number[], maxTokens: number | null, extra: Partial<GenerationRequest> = {}): GenerationRequest => ({ promptIds, maxTokens, sampling: GREEDY, ...extra });
const textOf = (ids: number[]) => ids.map((id) => String.fromCharCode(id)).join("");
const prompt = TINY_REFERENCE.prompt_ids;
const expected = TINY_REFERENCE.generated_ids;

describe("KvBlockPool", () => {
  test("grows many tables in one ALLOC, frees them in one FREE, mirrors the runner's free count", async () => {
    const runner = await startRunner(8);
    const pool = new KvBlockPool(runner, 16, 8);
    const a = new KvBlockTable(16);
    const b = new KvBlockTable(16);
    expect(a.blocksNeeded(17)).toBe(2);
    expect(blocksFor(32, 16)).toBe(2);
    expect(pool.shortfall([{ table: a, entries: 17 }, { table: b, entries: 1 }])).toBe(3);
    await pool.grow([{ table: a, entries: 17 }, { table: b, entries: 1 }]);
    expect(a.blocks.length).toBe(2);
    expect(b.blocks.length).toBe(1);
    expect(new Set([...a.blocks, ...b.blocks]).size).toBe(3);
    expect(pool.free).toBe(5);
    expect((await runner.queryInfo()).free_blocks).toBe(5);
    await pool.grow([{ table: a, entries: 20 }]); // already holds 32
    expect(pool.free).toBe(5);
    await expect(pool.grow([{ table: b, entries: 16 * 7 }])).rejects.toBeInstanceOf(KvCacheFullError);
    expect(b.blocks.length).toBe(1);
    await pool.release([a, b]);
    expect(a.blocks).toEqual([]);
    expect(pool.free).toBe(8);
    expect((await runner.queryInfo()).free_blocks).toBe(8);
  });
});

describe("GenerationScheduler", () => {
  let runner: RunnerProcess;
  let scheduler: GenerationScheduler;
  beforeAll(async () => {
    runner = await startRunner(64);
    scheduler = new GenerationScheduler(runner, tokenizer);
  });

  test("greedy tokens equal the PyTorch reference", async () => {
    const result = await scheduler.submit(request(prompt, expected.length, { logprobs: 2 })).result();
    expect(result.tokens.map((t) => t.id)).toEqual(expected);
    expect(result.finishReason).toBe("length");
    expect(result.promptTokens).toBe(prompt.length);
    expect(result.completionTokens).toBe(expected.length);
    expect(result.text).toBe(tokenizer.decode(expected));
    for (const token of result.tokens) {
      expect(token.top!.length).toBe(2);
      expect(token.top![0]!.id).toBe(token.id); // greedy picks the most likely
      expect(token.logprob).toBeLessThan(0);
    }
    expect(scheduler.stats.kvBlocksUsed).toBe(scheduler.stats.kvBlocksPrefixCached); // only the prefix cache keeps blocks
    expect(scheduler.stats.kvBlocksPrefixReferenced).toBe(0);
  });

  test("concurrent requests decode together and each gets its own greedy answer", async () => {
    const prompts = Array.from({ length: 6 }, (_, i) => [256, ...new TextEncoder().encode(`request ${i}: `)]);
    const alone = [];
    for (const p of prompts) alone.push((await scheduler.submit(request(p, 12)).result()).tokens.map((t) => t.id));
    const before = scheduler.stats;
    const together = await Promise.all(prompts.map((p) => scheduler.submit(request(p, 12)).result()));
    expect(together.map((r) => r.tokens.map((t) => t.id))).toEqual(alone);
    const after = scheduler.stats;
    expect(after.batchedDecodeSteps).toBeGreaterThan(before.batchedDecodeSteps);
    expect(after.maxDecodeBatch).toBe(6);
    // 6 × 11 decode tokens in about 11 steps, not 66.
    expect(after.decodeSteps - before.decodeSteps).toBeLessThan(20);
    expect(after.kvBlocksUsed).toBe(after.kvBlocksPrefixCached); // only the prefix cache keeps blocks
    expect(after.kvBlocksPrefixReferenced).toBe(0);
  });

  test("chunked prefill (4 tokens a step) and a long prompt give the same greedy tokens", async () => {
    // A second scheduler on the same runner: no prefix cache, so it keeps no blocks the first one's pool does not know of.
    const chunked = new GenerationScheduler(runner, tokenizer, { prefillChunk: 4, prefixCache: false });
    const result = await chunked.submit(request(prompt, expected.length)).result();
    expect(result.tokens.map((t) => t.id)).toEqual(expected);
    expect(chunked.stats.forwards).toBe(Math.ceil(prompt.length / 4) + expected.length - 1);
    const long = [256, ...new TextEncoder().encode("a fairly long prompt ".repeat(20))];
    const whole = await scheduler.submit(request(long, 5)).result();
    const pieces = await chunked.submit(request(long, 5)).result();
    expect(pieces.tokens).toEqual(whole.tokens);
  });

  test("preemption when the cache is full: every request still gets its greedy answer", async () => {
    const small = await startRunner(6); // 96 tokens
    const tight = new GenerationScheduler(small, tokenizer);
    const prompts = Array.from({ length: 4 }, (_, i) => [256, ...new TextEncoder().encode(`${i}`.repeat(10))]);
    const alone = [];
    for (const p of prompts) alone.push((await tight.submit(request(p, 30)).result()).tokens.map((t) => t.id));
    const together = await Promise.all(prompts.map((p) => tight.submit(request(p, 30)).result()));
    expect(together.map((r) => r.tokens.map((t) => t.id))).toEqual(alone);
    expect(tight.stats.preemptions).toBeGreaterThan(0);
    expect(tight.stats.kvBlocksUsed).toBe(tight.stats.kvBlocksPrefixCached); // only the prefix cache keeps blocks
    expect(tight.stats.kvBlocksPrefixReferenced).toBe(0);
    expect((await small.queryInfo()).free_blocks).toBe(6 - tight.stats.kvBlocksPrefixCached);
  });

  test("stop strings end the text before them; eos ids end it without their text", async () => {
    const text = textOf(expected); // the byte tokenizer: id = byte
    const at = text.indexOf("{");
    expect(at).toBeGreaterThan(0);
    const stopped = await scheduler.submit(request(prompt, expected.length, { stop: ["{"] })).result();
    expect(stopped.finishReason).toBe("stop");
    expect(stopped.text).toBe(tokenizer.decode(expected.slice(0, at)));
    expect(stopped.completionTokens).toBe(at + 1);

    const eos = await scheduler.submit(request(prompt, expected.length, { stopTokenIds: [expected[3]!] })).result();
    expect(eos.finishReason).toBe("stop");
    expect(eos.tokens.map((t) => t.id)).toEqual(expected.slice(0, 4));
    expect(eos.text).toBe(tokenizer.decode(expected.slice(0, 3)));
  });

  test("streamed deltas add up to the text; max_tokens ends with length", async () => {
    let text = "";
    let tokens = 0;
    let finish = null;
    for await (const event of scheduler.submit(request(prompt, 5))) {
      if (event.type === "delta") {
        text += event.text;
        tokens += event.tokens.length;
      } else finish = event;
    }
    expect(tokens).toBe(5);
    expect(text).toBe(tokenizer.decode(expected.slice(0, 5)));
    expect(finish).toMatchObject({ type: "finish", reason: "length", promptTokens: prompt.length, completionTokens: 5, ctxr: { prompt_tokens_computed: prompt.length } });
  });

  test("seeded sampling repeats; the seed matters", async () => {
    const sampled = (seed: number) => scheduler.submit(request(prompt, 20, { sampling: { temperature: 1, topP: 0.95, topK: 0, seed } })).result();
    const a = await sampled(7);
    const b = await sampled(7);
    const c = await sampled(8);
    expect(b.tokens).toEqual(a.tokens);
    expect(c.tokens).not.toEqual(a.tokens);
  });

  test("cancel frees the request's blocks", async () => {
    const before = scheduler.stats.cancelled;
    const handle = scheduler.submit(request(prompt, 500));
    let seen = 0;
    for await (const event of handle) {
      if (event.type === "delta" && ++seen === 3) handle.cancel();
    }
    await Bun.sleep(50);
    expect(scheduler.stats.cancelled).toBe(before + 1);
    expect(scheduler.stats.running).toBe(0);
    expect(scheduler.stats.kvBlocksUsed).toBe(scheduler.stats.kvBlocksPrefixCached); // only the prefix cache keeps blocks
    expect(scheduler.stats.kvBlocksPrefixReferenced).toBe(0);
    expect((await runner.queryInfo()).free_blocks).toBe(64 - scheduler.stats.kvBlocksPrefixCached);
  });

  test("prompts the model and cache cannot hold are refused", () => {
    expect(scheduler.maxModelLen).toBe(64 * 16);
    expect(() => scheduler.submit(request(new Array(1024).fill(65), 1))).toThrow(PromptTooLongError);
    expect(() => scheduler.submit(request(new Array(1024).fill(65), 1))).toThrow(/at most 1023/);
    expect(() => scheduler.submit(request([256, 65], 1023))).toThrow(/1025 were requested/);
    expect(() => scheduler.submit(request([], 1))).toThrow(/empty/);
    expect(() => scheduler.submit(request([259], 1))).toThrow(/not in the model's vocabulary/);
    // Without max_tokens: up to the model's length.
    expect(() => scheduler.submit(request(new Array(1023).fill(65), null)).cancel()).not.toThrow();
  });

  test("a runner crash fails the running requests; the runner restarts and the next request succeeds", async () => {
    const crashRunner = await startRunner(64);
    const crashy = new GenerationScheduler(crashRunner, tokenizer);
    crashRunner.onCrash(() => crashy.runnerCrashed());
    const pid = crashRunner.pid!;
    const handles = [crashy.submit(request(prompt, 800)), crashy.submit(request([256, 66], 800))];
    let events = 0;
    const failures = handles.map((handle) =>
      (async () => {
        try {
          for await (const event of handle) if (event.type === "delta" && ++events === 4) process.kill(pid, "SIGKILL");
          return null;
        } catch (error) {
          return error as Error;
        }
      })(),
    );
    const errors = await Promise.all(failures);
    for (const error of errors) {
      expect(error).toBeInstanceOf(GenerationFailedError);
      expect(error!.message).toContain("crashed");
      expect(error!.message).toContain("SIGKILL");
    }
    const next = await crashy.submit(request(prompt, expected.length)).result();
    expect(next.tokens.map((t) => t.id)).toEqual(expected);
    expect(crashRunner.pid).not.toBe(pid);
    expect(crashy.stats.runnerRestarts).toBe(1);
    expect(crashy.stats.failed).toBe(2);
  });

  test("a runner that dies while idle is restarted before the next request", async () => {
    const idleRunner = await startRunner(16);
    const idle = new GenerationScheduler(idleRunner, tokenizer);
    idleRunner.onCrash(() => idle.runnerCrashed());
    const pid = idleRunner.pid!;
    process.kill(pid, "SIGKILL");
    for (let i = 0; i < 100 && idleRunner.pid === pid; i++) await Bun.sleep(20);
    const result = await idle.submit(request(prompt, 3)).result();
    expect(result.tokens.map((t) => t.id)).toEqual(expected.slice(0, 3));
    expect(idle.stats.runnerRestarts).toBe(1);
  });
});

describe("admission control", () => {
  /** A request that keeps the only running slot busy until cancelled. */
  const long = () => request(prompt, 900, { stopTokenIds: [] });

  test("past maxWaiting waiting requests submit throws QueueFullError; the queue and the runner are untouched", async () => {
    const runner = await startRunner(64);
    const limited = new GenerationScheduler(runner, tokenizer, { maxBatch: 1, maxWaiting: 2 });
    const running = limited.submit(long());
    const waiting = [limited.submit(request(prompt, 2)), limited.submit(request(prompt, 2))];
    expect(limited.stats.waiting).toBe(2);
    let refusal: unknown = null;
    try {
      limited.submit(request(prompt, 2));
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toBeInstanceOf(QueueFullError);
    expect((refusal as QueueFullError).limit).toBe(2);
    expect((refusal as QueueFullError).retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(limited.stats.rejected).toBe(1);
    expect(limited.stats.waiting).toBe(2);
    running.cancel();
    for (const handle of waiting) expect((await handle.result()).completionTokens).toBe(2);
    expect(() => new GenerationScheduler(runner, tokenizer, { maxWaiting: 0 })).toThrow(RangeError);
  });

  test("a request's deadline cancels it while it waits and while it runs; the queue time is in its usage", async () => {
    const runner = await startRunner(64);
    const limited = new GenerationScheduler(runner, tokenizer, { maxBatch: 1 });
    // The tiny model decodes fast, and how fast depends on the machine: waits and deadlines are a
    // fraction of how long a long request takes here, so that it is still running when they pass.
    const calibrationStarted = performance.now();
    await limited.submit(long()).result();
    const short = Math.max(5, Math.floor((performance.now() - calibrationStarted) / 8));

    const running = limited.submit(long());
    const waiter = limited.submit(request(prompt, 2, { deadlineMs: short }));
    await expect(waiter.result()).rejects.toThrow(DeadlineExceededError);
    expect(limited.stats.waiting).toBe(0);
    expect(limited.stats.timedOut).toBe(1);
    running.cancel();
    await Bun.sleep(50);

    const queued = limited.submit(long());
    const submittedAt = performance.now();
    const behind = limited.submit(request(prompt, 2));
    // When the running request let go of the only slot: at the cancel, or earlier if it ended by itself.
    const released = (async () => {
      try {
        for await (const _ of queued);
      } catch {
        // cancelled
      }
      return performance.now();
    })();
    await Bun.sleep(short);
    queued.cancel();
    const held = (await released) - submittedAt;
    const result = await behind.result();
    // It waited while the slot was held (a few ms of slack: the end is seen just after the scheduler's step).
    expect(result.ctxr.queue_ms).toBeGreaterThanOrEqual(Math.min(short, held) - 5);
    expect(result.ctxr.queue_ms).toBeLessThanOrEqual(performance.now() - submittedAt);

    const runs = limited.submit(request(prompt, 900, { stopTokenIds: [], deadlineMs: short }));
    let tokens = 0;
    let failure: unknown = null;
    try {
      for await (const event of runs) if (event.type === "delta") tokens++;
    } catch (error) {
      failure = error;
    }
    expect(failure).toBeInstanceOf(DeadlineExceededError);
    expect((failure as DeadlineExceededError).field).toBe("ctxr.deadline_ms");
    expect(tokens).toBeGreaterThan(0);
    await Bun.sleep(50);
    expect(limited.stats.timedOut).toBe(2);
    expect(limited.stats.running).toBe(0);
    expect(limited.stats.kvBlocksUsed).toBe(limited.stats.kvBlocksPrefixCached);
    expect((await runner.queryInfo()).free_blocks).toBe(64 - limited.stats.kvBlocksPrefixCached);
  });

  test("the scheduler's request timeout applies to every request; a request's own deadline may only be shorter", async () => {
    const runner = await startRunner(64);
    // Timeouts a fraction of how long a long request takes on this machine (see above).
    const calibrationStarted = performance.now();
    await new GenerationScheduler(await startRunner(64), tokenizer).submit(long()).result();
    const timeout = Math.max(10, Math.floor((performance.now() - calibrationStarted) / 8));
    const timed = new GenerationScheduler(runner, tokenizer, { requestTimeoutMs: timeout });
    const capped = timed.submit(request(prompt, 900, { stopTokenIds: [], deadlineMs: 60_000 }));
    const error = await capped.result().catch((e) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error.field).toBe("");
    expect(error.deadlineMs).toBe(timeout);
    expect(error.message).toContain("the server's request timeout");
    const shorter = await timed.submit(request(prompt, 900, { stopTokenIds: [], deadlineMs: Math.max(5, Math.floor(timeout / 2)) })).result().catch((e) => e);
    expect(shorter.field).toBe("ctxr.deadline_ms");
    // A request that finishes in time is not touched by its deadline (a timeout far above what 3
    // tokens take: the calibrated one above is a few ms, which a loaded machine can exceed).
    const roomy = new GenerationScheduler(runner, tokenizer, { requestTimeoutMs: 60_000 });
    expect((await roomy.submit(request(prompt, 3, { deadlineMs: 30_000 })).result()).completionTokens).toBe(3);
    expect(() => new GenerationScheduler(runner, tokenizer, { requestTimeoutMs: 0 })).toThrow(RangeError);
  });
});

describe("automatic prefix cache", () => {
  const tokens = (seed: number, n: number) => Array.from({ length: n }, (_, i) => 32 + ((seed * 131 + i * 7 + ((i * i) % 13)) % 90));

  test("a prompt whose prefix was computed before starts from the cached blocks and decodes as a cold prefill does", async () => {
    const cold = new GenerationScheduler(await startRunner(64), tokenizer, { prefixCache: false });
    const warm = new GenerationScheduler(await startRunner(64), tokenizer);
    const shared = tokens(1, 100);
    const first = [...shared, ...tokens(2, 9)];
    const second = [...shared, ...tokens(3, 30)];
    for (const prompt of [first, second]) {
      const expected = await cold.submit(request(prompt, 12, { logprobs: 0 })).result();
      const got = await warm.submit(request(prompt, 12, { logprobs: 0 })).result();
      expect(got.tokens.map((t) => t.id)).toEqual(expected.tokens.map((t) => t.id));
      // Same blocks, same positions: the logprobs agree to float rounding (the batch shape differs).
      for (let i = 0; i < got.tokens.length; i++) expect(Math.abs(got.tokens[i]!.logprob! - expected.tokens[i]!.logprob!)).toBeLessThan(1e-4);
      expect(expected.ctxr!.prompt_tokens_prefix_reused).toBe(0);
    }
    // The second prompt shares 100 tokens (6 full blocks) with the first.
    const again = await warm.submit(request(second, 1)).result();
    expect(again.ctxr!.prompt_tokens_prefix_reused).toBe(Math.floor((second.length - 1) / 16) * 16);
    expect(warm.stats.prefixBlocksHit).toBeGreaterThan(0);
    expect(warm.stats.kvBlocksPrefixReferenced).toBe(0);
  });

  test("under memory pressure unreferenced prefix blocks are evicted; answers stay those of a cold prefill", async () => {
    const cold = new GenerationScheduler(await startRunner(24), tokenizer, { prefixCache: false });
    const warm = new GenerationScheduler(await startRunner(24), tokenizer);
    // Eight prompts of 130 tokens (8 full blocks each) through a 24-block cache, some twice, a few at once.
    const prompts = Array.from({ length: 8 }, (_, i) => tokens(10 + i, 130));
    const order = [0, 1, 2, 0, 3, 4, 1, 5, 6, 7, 2, 0];
    for (let i = 0; i < order.length; i += 2) {
      const batch = order.slice(i, i + 2).map((k) => prompts[k]!);
      const expected = await Promise.all(batch.map((p) => cold.submit(request(p, 6)).result()));
      const got = await Promise.all(batch.map((p) => warm.submit(request(p, 6)).result()));
      expect(got.map((r) => r.tokens.map((t) => t.id))).toEqual(expected.map((r) => r.tokens.map((t) => t.id)));
    }
    expect(warm.stats.prefixBlocksEvicted).toBeGreaterThan(0);
    expect(warm.stats.prefixBlocksHit).toBeGreaterThan(0);
    expect(warm.stats.kvBlocksUsed).toBe(warm.stats.kvBlocksPrefixCached);
    expect(warm.stats.kvBlocksPrefixReferenced).toBe(0);
  });

  test("the next turn finds the last answer's tokens too: generated blocks stay cached when a sequence ends", async () => {
    const warm = new GenerationScheduler(await startRunner(64), tokenizer);
    const turn1 = tokens(90, 40);
    const answer = await warm.submit(request(turn1, 60)).result();
    const history = [...turn1, ...answer.tokens.map((t) => t.id)];
    const turn2 = await warm.submit(request([...history, ...tokens(91, 12)], 1)).result();
    // Written when turn 1 ended: 40 + 60 − 1 tokens, so 6 full blocks (96 tokens), 56 of them generated.
    expect(turn2.ctxr!.prompt_tokens_prefix_reused).toBe(96);
  });

  test("requests arriving together with a common prefix compute it once: the others wait for its blocks, then start after them", async () => {
    const cold = new GenerationScheduler(await startRunner(64), tokenizer, { prefixCache: false });
    const warm = new GenerationScheduler(await startRunner(64), tokenizer, { prefillChunk: 64 });
    const shared = tokens(60, 160);
    const prompts = [0, 1, 2, 3].map((k) => [...shared, ...tokens(61 + k, 10 + k)]);
    const expected = await Promise.all(prompts.map((p) => cold.submit(request(p, 5)).result()));
    const got = await Promise.all(prompts.map((p) => warm.submit(request(p, 5)).result()));
    expect(got.map((r) => r.tokens.map((t) => t.id))).toEqual(expected.map((r) => r.tokens.map((t) => t.id)));
    // The 160 shared tokens (10 blocks) are prefilled once; each other request computes only its tail.
    const tails = prompts.slice(1).map((p) => p.length - 160);
    expect(got.slice(1).map((r) => r.ctxr!.prompt_tokens_prefix_reused)).toEqual([160, 160, 160]);
    expect(warm.stats.prefillTokens).toBe(prompts[0]!.length + tails.reduce((a, b) => a + b, 0));
    expect(cold.stats.prefillTokens).toBe(prompts.reduce((sum, p) => sum + p.length, 0));
    expect(warm.stats.kvBlocksPrefixReferenced).toBe(0);
  });

  test("a running sequence's filled blocks are found by a request admitted while it still decodes", async () => {
    const warm = new GenerationScheduler(await startRunner(64), tokenizer);
    const prompt = tokens(80, 70);
    const long = warm.submit(request(prompt, 200));
    const first = long[Symbol.asyncIterator]();
    await first.next();
    const second = await warm.submit(request([...prompt.slice(0, 64), ...tokens(81, 5)], 1)).result();
    expect(second.ctxr!.prompt_tokens_prefix_reused).toBe(64);
    expect(warm.stats.kvBlocksPrefixReferenced).toBeGreaterThanOrEqual(4);
    long.cancel();
  });

  test("many requests at once, sharing prefixes and evicting, with preemption: every answer is a cold prefill's", async () => {
    const cold = new GenerationScheduler(await startRunner(40), tokenizer, { prefixCache: false });
    const warm = new GenerationScheduler(await startRunner(40), tokenizer);
    // Three shared 64-token prefixes, each followed by its own tail: 16 requests submitted together, twice.
    const prefixes = [0, 1, 2].map((k) => tokens(50 + k, 64));
    const prompts = Array.from({ length: 16 }, (_, i) => [...prefixes[i % 3]!, ...tokens(70 + i, 20 + (i % 5) * 9)]);
    const expected = await Promise.all(prompts.map((p) => cold.submit(request(p, 8)).result()));
    for (let round = 0; round < 2; round++) {
      const got = await Promise.all(prompts.map((p) => warm.submit(request(p, 8)).result()));
      expect(got.map((r) => r.tokens.map((t) => t.id))).toEqual(expected.map((r) => r.tokens.map((t) => t.id)));
    }
    expect(warm.stats.preemptions + warm.stats.prefixBlocksEvicted).toBeGreaterThan(0);
    expect(warm.stats.prefixBlocksHit).toBeGreaterThan(0);
    expect(warm.stats.kvBlocksUsed).toBe(warm.stats.kvBlocksPrefixCached);
    expect(warm.stats.kvBlocksPrefixReferenced).toBe(0);
  });
});
