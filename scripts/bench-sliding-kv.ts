/**
 * KV memory of one 8K-token prompt on a Gemma 3-shaped model (issue 29, item 2): the bytes of KV
 * each cache group holds, against the target "global layers' full KV plus local layers' windows",
 * and against the keep-everything cache (`--kv-groups 1`, every layer every position).
 *
 *   npx bun scripts/bench-sliding-kv.ts [--tokens 8192] [--window 512] [--layers 6] [--chunk 512] [--json]
 *
 * The model is a random Gemma 3 with Gemma 3's layer pattern (5 sliding-window layers per global
 * one, llama.cpp's default period 6) and 1B's window (512) and KV shape (1 KV head of 256), so the
 * per-token KV bytes are those of the real model's layers; the weights do not change the memory.
 * The prompt runs through the real engine (chunked prefill of --chunk tokens a step, then one
 * decoded token); after every FORWARD the script reads the blocks each group has in use, and at
 * the end checks the runner's own free-block counts (INFO) against the server's.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { GenerationEngine } from "../src/engine/generationEngine.ts";
import type { ForwardRequest } from "../src/runner/runnerProtocol.ts";
import { buildRunner } from "../test/helpers/engineKit.ts";
import { writeTinyGemma3 } from "../test/helpers/gemma3TinyModel.ts";

const { values } = parseArgs({
  options: {
    tokens: { type: "string", default: "8192" },
    window: { type: "string", default: "512" },
    layers: { type: "string", default: "6" },
    chunk: { type: "string", default: "512" },
    json: { type: "boolean", default: false },
  },
});
const tokens = Number(values.tokens), window = Number(values.window), layers = Number(values.layers), chunk = Number(values.chunk);
const BLOCK = 16;
const KV_HEADS = 1, HEAD_DIM = 256, KV_BYTES = 2; // f16 KV cache (the CPU runner's default for GGUF)

interface Measure {
  groups: 1 | 2;
  fullLayers: number;
  slidingLayers: number;
  /** Most blocks in use during the prompt, per group; after the prompt's last chunk; while decoding the next token. */
  peakFull: number;
  peakSliding: number;
  promptFull: number;
  promptSliding: number;
  afterFull: number;
  afterSliding: number;
  /** The pools the runner allocated (blocks). */
  poolFull: number;
  poolSliding: number;
}

async function measure(model: string, groups: 1 | 2): Promise<Measure> {
  const blocks = Math.ceil((tokens + 64) / BLOCK);
  // The sliding pool sized for one sequence: its window, one more block, and a prefill chunk.
  const slidingBlocks = Math.ceil(window / BLOCK) + 1 + Math.ceil(chunk / BLOCK);
  const engine = await GenerationEngine.open({ model, runner: buildRunner(), kvBlocks: blocks, kvSlidingBlocks: slidingBlocks, blockSize: BLOCK, threads: 2, kvGroups: groups, prefillChunk: chunk, prefixCache: false });
  try {
    const info = engine.runner.info;
    const slidingLayers = info.kv_groups?.[1]?.layers.length ?? 0;
    const m: Measure = {
      groups,
      fullLayers: info.layers - slidingLayers,
      slidingLayers,
      peakFull: 0,
      peakSliding: 0,
      promptFull: 0,
      promptSliding: 0,
      afterFull: 0,
      afterSliding: 0,
      poolFull: info.num_blocks,
      poolSliding: info.kv_groups?.[1]?.num_blocks ?? 0,
    };
    const runner = engine.runner;
    const forward = runner.forward.bind(runner);
    const free = runner.free.bind(runner);
    const used = (info: typeof runner.info) => ({
      full: (info.kv_groups?.[0] ?? info).num_blocks - (info.kv_groups?.[0] ?? info).free_blocks,
      sliding: info.kv_groups ? info.kv_groups[1]!.num_blocks - info.kv_groups[1]!.free_blocks : 0,
    });
    // What a step leaves held: the runner's counts after its FORWARD, and again after the FREE of
    // the blocks that left the window (the step's end); the last prefill step's is "after the prompt".
    let lastWasPrefill = false;
    const settle = async () => {
      const now = used(await runner.queryInfo());
      if (lastWasPrefill) [m.promptFull, m.promptSliding] = [now.full, now.sliding];
    };
    runner.forward = async (request: ForwardRequest) => {
      const before = used(await runner.queryInfo());
      m.peakFull = Math.max(m.peakFull, before.full);
      m.peakSliding = Math.max(m.peakSliding, before.sliding);
      lastWasPrefill = request.sequences[0]!.tokens.length > 1;
      // A decode step's tables, grown for the token it writes.
      if (!lastWasPrefill) [m.afterFull, m.afterSliding] = [before.full, before.sliding];
      const result = await forward(request);
      await settle();
      return result;
    };
    runner.free = async (ids: readonly number[], group?: number) => {
      await free(ids, group);
      await settle();
    };
    const promptIds = [2, ...Array.from({ length: tokens - 1 }, (_, i) => 6 + ((i * 7919) % 250))];
    await engine.scheduler.submit({ promptIds, maxTokens: 2, sampling: { temperature: 0, topP: 1, topK: 0 } }).result();
    return m;
  } finally {
    await engine.close();
  }
}

const dir = mkdtempSync(join(tmpdir(), "ctxr-bench-sliding-"));
try {
  const model = writeTinyGemma3(dir, { layers, window, heads: 2, kvHeads: KV_HEADS, headDim: HEAD_DIM, hidden: 64, contextLength: tokens + 64 });
  const perTokenLayer = 2 * KV_HEADS * HEAD_DIM * KV_BYTES;
  const blockBytes = BLOCK * perTokenLayer;
  const results = [];
  for (const groups of [2, 1] as const) {
    const m = await measure(model.gguf, groups);
    const fullLayers = groups === 2 ? m.fullLayers : layers;
    const slidingLayers = groups === 2 ? m.slidingLayers : 0;
    const bytes = (full: number, sliding: number) => full * blockBytes * fullLayers + sliding * blockBytes * slidingLayers;
    results.push({
      ...m,
      heldBytesPeak: bytes(m.peakFull, m.peakSliding),
      heldBytesPrompt: bytes(m.promptFull, m.promptSliding),
      heldBytesAfter: bytes(m.afterFull, m.afterSliding),
      poolBytes: bytes(m.poolFull, m.poolSliding),
    });
  }
  const split = results[0]!;
  // In whole blocks: the prompt's blocks in the global layers, the window's in the local ones.
  const target = Math.ceil(tokens / BLOCK) * blockBytes * split.fullLayers + Math.ceil(window / BLOCK) * blockBytes * split.slidingLayers;
  const out = { tokens, window, layers, chunk, blockSize: BLOCK, perTokenLayerBytes: perTokenLayer, targetBytes: target, results };
  if (values.json) console.log(JSON.stringify(out));
  else {
    console.log(`Gemma 3-shaped: ${layers} layers (${split.fullLayers} global, ${split.slidingLayers} sliding, window ${window}), ${tokens}-token prompt, ${chunk}-token chunks, block ${BLOCK}`);
    const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(2)} MiB`;
    console.log(`target after the prompt (global layers' full KV + local layers' windows): ${mib(target)}`);
    for (const r of results)
      console.log(
        `kv-groups ${r.groups}: after the prompt ${mib(r.heldBytesPrompt)} (full ${r.promptFull} blocks, sliding ${r.promptSliding}); ` +
          `while decoding the next token ${mib(r.heldBytesAfter)} (full ${r.afterFull}, sliding ${r.afterSliding}); ` +
          `peak during prefill ${mib(r.heldBytesPeak)} (full ${r.peakFull}, sliding ${r.peakSliding}); pools allocated ${mib(r.poolBytes)} (${r.poolFull} + ${r.poolSliding} blocks)`,
      );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
