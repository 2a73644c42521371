/**
 * Chunk reuse (`documents`, completion `segments`) through `serve --model` on a Gemma 3-shaped model (sliding-window and
 * global layers, two KV cache groups), which used to be refused: the documents' KV is cached and
 * reused — at the positions it was computed at (an exact prefix), and in another order with every
 * reused token recomputed — and the answers and logprobs are those of a server that keeps every
 * position's KV in one group and computes everything (policy full). The sliding group holds what a
 * plain prefill holds: every FORWARD, the KV-managed step's included, sees at most
 * ceil(window / block) + 1 + ceil(chunk / block) sliding blocks (a 64-token prefill chunk here,
 * against a prompt of 690 tokens), a decode step carries at most ceil(window / block) + 1 earlier
 * ones, and between requests the group holds none.
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
const CHUNK = 64;

/** A document of about 70 tokens (more than the window). */
function document(seed: number): { id: string; text: string } {
  const words = ["stone", "shore", "rain", "heart", "noon", "the", "near", "rests", "hears", "a", "of", "then"];
  const out: string[] = [];
  for (let i = 0; i < 40; i++) out.push(words[(i * (seed + 5) + seed) % words.length]!);
  return { id: `d${seed}`, text: out.join(" ") };
}

const DOCUMENTS = [document(1), document(2), document(3)];
const MESSAGES = [{ role: "user", content: "where does the stone rest" }];

interface Answer {
  content: string;
  logprobs: { token: string; logprob: number }[];
  ctxr: { prompt_tokens_prefix_reused: number; prompt_tokens_chunk_reused: number; prompt_tokens_recomputed: number; prompt_tokens_computed: number };
}

async function ask(api: EngineTestServer, order: number[], ctxr: Record<string, unknown> = {}): Promise<Answer> {
  const answer = await api.post("/v1/chat/completions", {
    model: "gemma3",
    messages: MESSAGES,
    documents: order.map((i) => DOCUMENTS[i]!),
    max_tokens: 6,
    temperature: 0,
    logprobs: true,
    ctxr,
  });
  expect(answer.status).toBe(200);
  const choice = answer.body.choices[0];
  return { content: choice.message.content, logprobs: choice.logprobs.content.map((e: { token: string; logprob: number }) => ({ token: e.token, logprob: e.logprob })), ctxr: answer.body.usage.ctxr };
}

function expectSameAnswer(got: Answer, want: Answer): void {
  expect(got.content).toBe(want.content);
  expect(got.logprobs.map((e) => e.token)).toEqual(want.logprobs.map((e) => e.token));
  got.logprobs.forEach((e, i) => expect(Math.abs(e.logprob - want.logprobs[i]!.logprob)).toBeLessThan(2e-3));
}

describe("serve --model gemma3: chunk reuse (documents) on a model with sliding-window layers", () => {
  let dir = "";
  let sliding: EngineTestServer;
  let everything: EngineTestServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "ctxr-gemma3-chunks-"));
    const model = writeTinyGemma3(dir, { window: WINDOW, layers: 4, pattern: [true, true, false, true], seed: 5 });
    // The automatic prefix cache off: a repeated prompt is served by the chunk cache's exact-prefix variants.
    sliding = await startEngineServer(model.gguf, { kvBlocks: 256, blockSize: BLOCK, prefixCache: false, prefillChunk: CHUNK });
    everything = await startEngineServer(model.gguf, { kvBlocks: 256, blockSize: BLOCK, kvGroups: 1, prefixCache: false });
  }, 120_000);
  afterAll(async () => {
    await sliding?.close();
    await everything?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("documents are cached and reused in both KV groups; answers are the keep-everything server's full prefill's", async () => {
    expect(sliding.engine.runner.info.kv_groups?.length).toBe(2);
    const runner = sliding.engine.runner;
    const forward = runner.forward.bind(runner);
    let mostCarried = 0;
    let mostHeld = 0;
    let decodeSteps = 0;
    runner.forward = (request: ForwardRequest) => {
      for (const sequence of request.sequences) {
        mostHeld = Math.max(mostHeld, sequence.slidingTable!.filter((block) => block !== NO_BLOCK).length);
        if (sequence.tokens.length !== 1) continue;
        const earlier = Math.ceil(sequence.indices[0]! / BLOCK);
        mostCarried = Math.max(mostCarried, sequence.slidingTable!.slice(0, earlier).filter((block) => block !== NO_BLOCK).length);
        decodeSteps++;
      }
      return forward(request);
    };
    const full = { policy: "full" };
    const betweenRequests = () => {
      const stats = sliding.engine.scheduler.stats;
      expect(stats.running).toBe(0);
      expect(stats.kvSlidingBlocksUsed).toBe(0);
    };

    // First time: computed and stored.
    const first = await ask(sliding, [0, 1, 2]);
    expect(first.ctxr.prompt_tokens_prefix_reused + first.ctxr.prompt_tokens_chunk_reused).toBe(0);
    expectSameAnswer(first, await ask(everything, [0, 1, 2], full));
    betweenRequests();

    // Again: every document is an exact prefix, imported where it was computed (relocation delta 0).
    const again = await ask(sliding, [0, 1, 2]);
    expect(again.ctxr.prompt_tokens_prefix_reused).toBeGreaterThan(3 * WINDOW);
    expect((again as unknown as { ctxr: { tier_hits: { host: number } } }).ctxr.tier_hits.host).toBe(4);
    expect(again.ctxr.prompt_tokens_computed).toBeLessThan(first.ctxr.prompt_tokens_computed - 3 * WINDOW);
    expectSameAnswer(again, first);
    betweenRequests();

    // Another order, every reused token recomputed: the full prefill of that order.
    const moved = await ask(sliding, [2, 0, 1], { policy: "prophet", recompute_ratio: 1 });
    expect(moved.ctxr.prompt_tokens_recomputed).toBeGreaterThan(3 * WINDOW);
    expectSameAnswer(moved, await ask(everything, [2, 0, 1], full));
    betweenRequests();

    // Another order reused as is (re-rotated, not recomputed): an answer, from cached KV.
    const asIs = await ask(sliding, [1, 2, 0], { policy: "none" });
    expect(asIs.ctxr.prompt_tokens_chunk_reused).toBeGreaterThan(3 * WINDOW);
    expect(asIs.logprobs.length).toBeGreaterThan(0);
    betweenRequests();

    console.log(`first ${JSON.stringify(first.ctxr)}\nagain ${JSON.stringify(again.ctxr)}\nmoved ${JSON.stringify(moved.ctxr)}\nas is ${JSON.stringify(asIs.ctxr)}\ndecode steps ${decodeSteps}, most sliding blocks carried ${mostCarried}, held by a FORWARD ${mostHeld}`);
    // Completion segments (chunks, then the question) too.
    const segments = (api: EngineTestServer, ctxr: Record<string, unknown>) =>
      api.post("/v1/completions", { model: "gemma3", segments: [...DOCUMENTS.map((d) => d.text), "where does the stone rest"], max_tokens: 4, temperature: 0, ctxr });
    const completion = await segments(sliding, { policy: "prophet", recompute_ratio: 1 });
    expect(completion.status).toBe(200);
    expect(completion.body.choices[0].text).toBe((await segments(everything, { policy: "full" })).body.choices[0].text);
    betweenRequests();

    expect(decodeSteps).toBeGreaterThan(8);
    expect(mostCarried).toBeLessThanOrEqual(Math.ceil(WINDOW / BLOCK) + 1);
    expect(mostHeld).toBeGreaterThan(Math.ceil(WINDOW / BLOCK));
    expect(mostHeld).toBeLessThanOrEqual(Math.ceil(WINDOW / BLOCK) + 1 + CHUNK / BLOCK);
    runner.forward = forward;
  }, 300_000);

  test("with the automatic prefix cache on, a repeated documents prompt resumes from cached blocks and a window checkpoint, and answers the same", async () => {
    const cached = await startEngineServer(sliding.engine.modelDir, { kvBlocks: 256, blockSize: BLOCK, prefillChunk: CHUNK });
    try {
      const first = await ask(cached, [0, 1, 2]);
      const again = await ask(cached, [0, 1, 2]);
      // From the prefix cache's blocks (the KV-managed prefill starts after them), not from chunk variants.
      expect(again.ctxr.prompt_tokens_prefix_reused).toBeGreaterThan(3 * WINDOW);
      expect((again as unknown as { ctxr: { tier_hits: { host: number } } }).ctxr.tier_hits.host).toBe(0);
      expectSameAnswer(first, await ask(everything, [0, 1, 2], { policy: "full" }));
      expectSameAnswer(again, first);
      const moved = await ask(cached, [2, 0, 1], { policy: "prophet", recompute_ratio: 1 });
      expectSameAnswer(moved, await ask(everything, [2, 0, 1], { policy: "full" }));
      const stats = cached.engine.scheduler.stats;
      expect(stats.running).toBe(0);
      expect(stats.kvSlidingBlocksUsed).toBe(stats.kvSlidingBlocksCheckpointed);
    } finally {
      await cached.close();
    }
  }, 120_000);
});
