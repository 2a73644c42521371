/**
 * What llama.cpp re-processes on each turn of a conversation with a sliding-window model (issue 29,
 * item 2), through libllama as node-llama-cpp drives it (one sequence kept between turns, its cache
 * state adapted to the next prompt as llama-server's prompt cache does: kept up to the first
 * different token when the cache can be cut there, else evaluated again from the start).
 *
 *   npx bun scripts/oracle/llamacpp-swa-turns.ts [--node-llama-cpp DIR]
 *
 * The model is the random Gemma 3 of test/server/gemma3SlidingPrefixCache.test.ts (window 32, 4
 * layers, 3 of them sliding); each turn adds a ~600-token user message, and the answer is 6 tokens,
 * or --reasoning tokens of reasoning and 6 answer tokens whose history keeps only the answer (a
 * thinking model's template drops the reasoning). Each case runs with llama.cpp's default sliding-window
 * cache and with `swaFullCache` (every position kept).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { writeTinyGemma3 } from "../../test/helpers/gemma3TinyModel.ts";

const { values } = parseArgs({
  options: { "node-llama-cpp": { type: "string", default: "/work/llama/node_modules/node-llama-cpp" }, reasoning: { type: "string", default: "100,1000" } },
});

/** What this script uses of node-llama-cpp (not a dependency of ctxr: loaded from --node-llama-cpp). */
interface LlamaSequence {
  readonly nextTokenIndex: number;
  adaptStateToTokens(tokens: number[], allowShift: boolean): Promise<void>;
  evaluateWithoutGeneratingNewTokens(tokens: number[]): Promise<void>;
}
interface LlamaModel {
  createContext(options: { contextSize: number; sequences: number; swaFullCache: boolean }): Promise<{ getSequence(): LlamaSequence; dispose(): Promise<void> }>;
  dispose(): Promise<void>;
}
const { getLlama } = (await import(join(values["node-llama-cpp"]!, "dist", "index.js"))) as {
  getLlama(options: object): Promise<{ loadModel(options: { modelPath: string }): Promise<LlamaModel> }>;
};

const TURNS = 4;
const user = (turn: number) => Array.from({ length: 600 }, (_, i) => 6 + ((i * (turn + 3) * 7) % 250));
const ANSWER = [20, 21, 22, 23, 24, 25];
const reasoningLengths = values.reasoning!.split(",").map(Number);

const dir = mkdtempSync(join(tmpdir(), "ctxr-llamacpp-swa-"));
try {
  const file = writeTinyGemma3(dir, { window: 32, layers: 4, pattern: [true, true, false, true], seed: 11, contextLength: 16384 }).gguf;
  const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
  const model = await llama.loadModel({ modelPath: file });
  for (const reasoningTokens of [0, ...reasoningLengths]) {
    const reasoning = Array.from({ length: reasoningTokens }, (_, i) => 30 + (i % 50));
    for (const swaFullCache of [false, true]) {
      const context = await model.createContext({ contextSize: 16384, sequences: 1, swaFullCache });
      const sequence = context.getSequence();
      const turns = [];
      let history: number[] = [2];
      for (let turn = 1; turn <= TURNS; turn++) {
        const prompt = [...history, 4, ...user(turn), 5, 4];
        // Keep the cached state up to the first different token (the last prompt token is always run).
        await sequence.adaptStateToTokens(prompt.slice(0, -1), false);
        const reused = sequence.nextTokenIndex;
        await sequence.evaluateWithoutGeneratingNewTokens(prompt.slice(reused));
        await sequence.evaluateWithoutGeneratingNewTokens([...reasoning, ...ANSWER]);
        turns.push({ turn, prompt: prompt.length, reprocessed: prompt.length - reused, earlier: history.length });
        history = [...prompt, ...ANSWER, 5];
      }
      console.log(JSON.stringify({ case: reasoningTokens === 0 ? "history as generated" : `${reasoningTokens} reasoning tokens dropped from history`, cache: swaFullCache ? "swaFullCache" : "sliding-window (default)", turns }));
      await context.dispose();
    }
  }
  await model.dispose();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
