/**
 * Sliding-window attention done right, through `serve --model` on a Gemma 3-shaped model (global
 * and sliding-window layers, two KV cache groups): over a multi-turn conversation, turn n reports
 * at least 95% of turns 1..n−1 as `cached_tokens` (the full-attention blocks plus the window
 * checkpoints the previous turn left), its answer and logprobs are those of a server that keeps
 * every position's KV and caches nothing (`kvGroups: 1`, prefix cache off), and between requests
 * the sliding group holds only window checkpoints (at each request's prompt end and its end), each
 * at most the window.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import type { ForwardRequest } from "../../src/runner/runnerProtocol.ts";
import { writeTinyGemma3 } from "../helpers/gemma3TinyModel.ts";
import { startEngineServer, type EngineTestServer } from "./serverKit.ts";

const WINDOW = 32;
const BLOCK = 16;
const TURNS = 4;

/** A user message of about 600 tokens, different each turn. */
function userMessage(turn: number): string {
  const words = ["the", "heart", "of", "a", "stone", "rests", "near", "the", "shore", "at", "noon", "then", "hears", "rain"];
  const out: string[] = [`turn ${turn}:`];
  for (let i = 0; i < 150; i++) out.push(words[(i * (turn + 3)) % words.length]!);
  return out.join(" ");
}

interface Chat {
  content: string;
  cached: number;
  promptTokens: number;
  logprobs: { token: string; logprob: number }[];
}

async function chat(api: EngineTestServer, messages: { role: string; content: string }[]): Promise<Chat> {
  const answer = await api.post("/v1/chat/completions", { model: "gemma3", messages, max_tokens: 6, temperature: 0, logprobs: true });
  expect(answer.status).toBe(200);
  const choice = answer.body.choices[0];
  return {
    content: choice.message.content,
    cached: answer.body.usage.prompt_tokens_details?.cached_tokens ?? 0,
    promptTokens: answer.body.usage.prompt_tokens,
    logprobs: choice.logprobs.content.map((entry: { token: string; logprob: number }) => ({ token: entry.token, logprob: entry.logprob })),
  };
}

describe("serve --model gemma3: sliding-window KV and the prefix cache across turns", () => {
  let dir = "";
  let sliding: EngineTestServer;
  let everything: EngineTestServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-gemma3-swa-"));
    const model = writeTinyGemma3(dir, { window: WINDOW, layers: 4, pattern: [true, true, false, true], seed: 11 });
    sliding = await startEngineServer(model.gguf, { kvBlocks: 512, blockSize: BLOCK });
    everything = await startEngineServer(model.gguf, { kvBlocks: 512, blockSize: BLOCK, kvGroups: 1, prefixCache: false });
  }, 120_000);
  afterAll(async () => {
    await sliding?.close();
    await everything?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("turn n finds ≥ 95% of turns 1..n−1 cached and answers as the keep-everything server does", async () => {
    const runnerGroups = sliding.engine.runner.info.kv_groups;
    expect(runnerGroups?.[1]).toMatchObject({ kind: "sliding_window", sliding_window: WINDOW, layers: [0, 1, 3] });
    expect(everything.engine.runner.info.kv_groups).toBeUndefined();
    const messages: { role: string; content: string }[] = [];
    const perCheckpoint = Math.ceil(WINDOW / BLOCK);
    // Every FORWARD: the sliding blocks a sequence brings from earlier steps are at most ceil(window/block)+1.
    const runner = sliding.engine.runner;
    const forward = runner.forward.bind(runner);
    let mostCarried = 0;
    let steps = 0;
    runner.forward = (request: ForwardRequest) => {
      for (const sequence of request.sequences) {
        const earlier = Math.ceil(sequence.indices[0]! / BLOCK);
        const carried = sequence.slidingTable!.slice(0, earlier).filter((block) => block !== NO_BLOCK).length;
        mostCarried = Math.max(mostCarried, carried);
        steps++;
      }
      return forward(request);
    };
    for (let turn = 1; turn <= TURNS; turn++) {
      const earlier = messages.length === 0 ? 0 : (await sliding.engine.tokenizeChatPrompt(messages, { addGenerationPrompt: false })).length;
      messages.push({ role: "user", content: userMessage(turn) });
      const got = await chat(sliding, messages);
      const want = await chat(everything, messages);
      expect(got.promptTokens).toBe(want.promptTokens);
      expect(want.cached).toBe(0);
      if (turn > 1) expect(got.cached).toBeGreaterThanOrEqual(0.95 * earlier);
      else expect(got.cached).toBe(0);
      expect(got.content).toBe(want.content);
      expect(got.logprobs.map((entry) => entry.token)).toEqual(want.logprobs.map((entry) => entry.token));
      got.logprobs.forEach((entry, i) => expect(Math.abs(entry.logprob - want.logprobs[i]!.logprob)).toBeLessThan(2e-3));
      // Between requests the sliding group holds window checkpoints only: each turn's at its prompt's end and at its own end, each at most the window's blocks.
      const stats = sliding.engine.scheduler.stats;
      expect(stats.running).toBe(0);
      expect(stats.kvSlidingBlocksUsed).toBe(stats.kvSlidingBlocksCheckpointed);
      expect(stats.kvSlidingBlocksUsed).toBeGreaterThan(0);
      expect(stats.kvSlidingBlocksUsed).toBeLessThanOrEqual(2 * turn * perCheckpoint);
      messages.push({ role: "assistant", content: got.content });
    }
    // The client sends the last answer otherwise (as a thinking model's template drops its reasoning): the
    // window checkpoint at the end of the last prompt still serves everything up to that prompt.
    const lastPrompt = (await sliding.engine.tokenizeChatPrompt(messages.slice(0, -1), { addGenerationPrompt: true })).length;
    const rewritten = [...messages.slice(0, -1), { role: "assistant", content: "rest" }, { role: "user", content: "the end" }];
    const got = await chat(sliding, rewritten);
    expect(got.cached).toBe(Math.floor(lastPrompt / BLOCK) * BLOCK);
    expect(got.content).toBe((await chat(everything, rewritten)).content);
    expect(steps).toBeGreaterThan(TURNS * 6);
    expect(mostCarried).toBe(Math.ceil(WINDOW / BLOCK) + 1);
    const metrics = (await sliding.get("/metrics")).text;
    expect(metrics).toMatch(/^ctxr_generation_kv_sliding_blocks_total 512$/m);
    expect(metrics).toMatch(new RegExp(`^ctxr_generation_kv_sliding_blocks_used ${sliding.engine.scheduler.stats.kvSlidingBlocksUsed}$`, "m"));
    expect((await everything.get("/metrics")).text).not.toMatch(/kv_sliding_blocks/);
  }, 300_000);

  test("a KV budget (sparse decode) is taken on this model, as on the keep-everything server (sparse decode itself: twoGroupSparseDecode.test.ts)", async () => {
    const messages = [{ role: "user", content: "the hat" }];
    for (const server of [sliding, everything]) {
      const budget = await server.post("/v1/chat/completions", { model: "gemma3", messages, ctxr: { kv_budget: 0.5 }, max_tokens: 2 });
      expect(budget.body.error?.message).toBeUndefined();
      expect(budget.status).toBe(200);
    }
  }, 120_000);

  test("a sliding pool of one sequence's worth: concurrent requests wait for it (admission counts each group), checkpoints are evicted for room, answers stay the keep-everything server's", async () => {
    const model = sliding.engine.modelDir;
    // ceil(32/16) + 1 blocks of window and a 512-token chunk's 32: one prefilling sequence at a time.
    await expect(startEngineServer(model, { kvBlocks: 512, blockSize: BLOCK, kvSlidingBlocks: 3 + 31 })).rejects.toThrow(
      /the sliding-window KV group has 34 blocks, fewer than one sequence needs in a prefill step: 35 \(its window of 32 tokens, one more block and a 512-token chunk, in blocks of 16\); give --kv-sliding-blocks at least that/,
    );
    const tight = await startEngineServer(model, { kvBlocks: 512, blockSize: BLOCK, kvSlidingBlocks: 3 + 32 });
    try {
      expect(tight.engine.runner.info.kv_groups?.[1]?.num_blocks).toBe(35);
      const conversations = [1, 2, 3, 4].map((turn) => [{ role: "user", content: userMessage(turn + 4) }]);
      const got = await Promise.all(conversations.map((messages) => chat(tight, messages)));
      const want = await Promise.all(conversations.map((messages) => chat(everything, messages)));
      got.forEach((answer, i) => {
        expect(answer.content).toBe(want[i]!.content);
        answer.logprobs.forEach((entry, k) => expect(Math.abs(entry.logprob - want[i]!.logprobs[k]!.logprob)).toBeLessThan(2e-3));
      });
      // Each left its window checkpoint (2 blocks); the next request's prefill needed the pool, so some were evicted.
      const stats = tight.engine.scheduler.stats;
      expect(stats.kvSlidingBlocksUsed).toBe(stats.kvSlidingBlocksCheckpointed);
      expect(stats.kvSlidingBlocksUsed).toBeLessThan(conversations.length * 2);
      // The second turn of the first conversation still resumes from its checkpoint (or recomputes: same answer).
      const next = [...conversations[0]!, { role: "assistant", content: got[0]!.content }, { role: "user", content: "and then" }];
      const again = await chat(tight, next);
      expect(again.content).toBe((await chat(everything, next)).content);
    } finally {
      await tight.close();
    }
  }, 300_000);
});
