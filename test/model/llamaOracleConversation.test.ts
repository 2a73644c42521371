/**
 * The llama.cpp oracle's conversation mode (tools/llama-oracle/conversation.cpp): a conversation
 * through one llama-server slot's prompt cache, as llama-server serves it (issue 29, item 2: what
 * llama.cpp re-processes per turn). On a tiny llama (no sliding window) every turn after the first
 * reuses its whole common prefix. On a tiny gemma3 (window 32; llama-server's SWA cache holds
 * GGML_PAD(4 × 32 + 512, 256) = 768 positions) the slot keeps the prefix while the SWA cache still
 * holds the window before the first new token, restores a context checkpoint when one is usable,
 * and otherwise processes the whole prompt again, which --swa-full avoids.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { tempFolder } from "../helpers/cli.ts";
import { llamaConversation, writeRandomGguf, type ConversationTurn } from "../helpers/llamaOracle.ts";
import { pseudoRandomIds } from "../helpers/logprobRows.ts";

setDefaultTimeout(120_000);

const VOCAB = 256; // the byte tokens of random_gguf.py's vocabulary
const END_OF_TURN = 262; // one of its special tokens: the id the client's rendering puts after an answer
const SHAPE = { layers: 8, hidden: 128, heads: 4, kvHeads: 2, headDim: 64, ffn: 256, context: 4096 };

let scratch: { path: string; cleanup(): void };
let llamaFile: string;
let gemmaFile: string;

beforeAll(() => {
  scratch = tempFolder("ctxr-llama-conversation-");
  llamaFile = writeRandomGguf("llama", join(scratch.path, "llama.gguf"), SHAPE);
  gemmaFile = writeRandomGguf("gemma3", join(scratch.path, "gemma3.gguf"), { ...SHAPE, extraArgs: ["--sliding-window", "32"] });
});
afterAll(() => scratch?.cleanup());

/** A chat client's conversation: each turn resends the history, its answers included, and adds a user message. */
function resentConversation(turns: number, userTokens: number, answerTokens: number): ConversationTurn[] {
  const out: ConversationTurn[] = [];
  let history: number[] = [];
  for (let t = 0; t < turns; t++) {
    const userStart = history.length;
    history = [...history, ...pseudoRandomIds(userTokens, VOCAB, 100 + t)];
    const answer = pseudoRandomIds(answerTokens, VOCAB, 200 + t);
    out.push({ prompt: history, answer, userStarts: [userStart] });
    history = [...history, ...answer, END_OF_TURN];
  }
  return out;
}

/** Turn 2 keeps only the first `kept` ids of turn 1's prompt (an edited message, a re-rendered answer) and adds `added`. */
function divergingConversation(firstPrompt: number, firstAnswer: number, kept: number, added: number): ConversationTurn[] {
  const first = pseudoRandomIds(firstPrompt, VOCAB, 7);
  return [
    { prompt: first, answer: pseudoRandomIds(firstAnswer, VOCAB, 8) },
    { prompt: [...first.slice(0, kept), ...pseudoRandomIds(added, VOCAB, 9)] },
  ];
}

describe("llama.cpp conversation mode: a resent history", () => {
  // 6 turns of 150 + 30 tokens: 1,085 positions, past the 768 that gemma3's SWA cache holds.
  const turns = resentConversation(6, 150, 30);

  test("llama (no sliding window): every later turn reuses the previous prompt and answer", () => {
    const result = llamaConversation(llamaFile, turns, scratch.path);
    expect(result.nSwa).toBe(0);
    expect(result.turns.map((t) => t.prompt)).toEqual(turns.map((t) => t.prompt.length));
    expect(result.turns[0]!.cached).toBe(0);
    for (let i = 1; i < turns.length; i++) {
      const turn = result.turns[i]!;
      expect(turn.cached).toBe(turns[i - 1]!.prompt.length + turns[i - 1]!.answer!.length);
      expect(turn.reprocessed).toBe(turn.prompt - turn.cached);
      expect(turn.startedOver).toBe(false);
      expect(turn.checkpointsHeld).toBe(0);
    }
  });

  test("gemma3: the SWA cache still holds the window, so the prefix is kept; checkpoints are made all the same", () => {
    const result = llamaConversation(gemmaFile, turns, scratch.path);
    expect(result.nSwa).toBe(32);
    expect(result.ctxCheckpoints).toBe(32);
    for (let i = 1; i < turns.length; i++) {
      expect(result.turns[i]!.cached).toBe(turns[i - 1]!.prompt.length + turns[i - 1]!.answer!.length);
      expect(result.turns[i]!.startedOver).toBe(false);
      expect(result.turns[i]!.checkpointRestored).toBe(-1);
    }
    expect(result.turns.at(-1)!.checkpointsHeld).toBeGreaterThan(0);
    expect(result.turns.at(-1)!.checkpointBytes).toBeGreaterThan(0);
  });
});

describe("llama.cpp conversation mode: a prefix the SWA cache no longer holds", () => {
  test("turn 2 keeps 300 of turn 1's 1,500 ids: gemma3 starts over, --swa-full and llama keep the 300", () => {
    const turns = divergingConversation(1500, 24, 300, 400);
    const gemma = llamaConversation(gemmaFile, turns, scratch.path).turns[1]!;
    expect(gemma).toMatchObject({ prompt: 700, cached: 0, reprocessed: 700, startedOver: true, checkpointRestored: -1 });
    const swaFull = llamaConversation(gemmaFile, turns, scratch.path, { swaFull: true });
    expect(swaFull.swaFull).toBe(true);
    expect(swaFull.turns[1]).toMatchObject({ cached: 300, reprocessed: 400, startedOver: false });
    expect(llamaConversation(llamaFile, turns, scratch.path).turns[1]).toMatchObject({ cached: 300, startedOver: false });
  });

  test("turn 2 drops turn 1's long answer: gemma3 restores the checkpoint made 4 tokens before turn 1's prompt ended", () => {
    // 600 prompt ids, then 800 generated ones push the SWA cache's oldest position past 600 − 32.
    const turns = divergingConversation(600, 800, 600, 200);
    const gemma = llamaConversation(gemmaFile, turns, scratch.path).turns[1]!;
    expect(gemma.startedOver).toBe(false);
    expect(gemma.checkpointRestored).toBe(596);
    expect(gemma.cached).toBe(595);
    const withoutCheckpoints = llamaConversation(gemmaFile, turns, scratch.path, { ctxCheckpoints: 0 }).turns[1]!;
    expect(withoutCheckpoints).toMatchObject({ cached: 0, reprocessed: 800, startedOver: true });
    expect(llamaConversation(llamaFile, turns, scratch.path).turns[1]).toMatchObject({ cached: 600, reprocessed: 200 });
  });
});

test("llama.cpp conversation mode: an id outside the vocabulary is named", () => {
  expect(() => llamaConversation(llamaFile, [{ prompt: [1, 2, 100_000] }], scratch.path)).toThrow(/id 100000 is outside the vocabulary/);
});
