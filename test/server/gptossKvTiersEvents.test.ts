/**
 * gpt-oss's two KV cache groups (full-attention layers and 32-entry sliding windows; a random
 * llama.cpp gguf-py file, its experts random too so the mixture-of-experts FFN runs) through the
 * KV features beyond the prefix cache and chunk reuse (gptossServe.test.ts):
 * - the chunk cache's disk tier: `documents` chunks written to --kv-dir by one server (no device or
 *   host tier) are read back by the next, which computes a fraction of the prompt and answers the
 *   same;
 * - KV events: the prompt's blocks arrive as BlockStored events of both groups, each tagged as
 *   vLLM's hybrid KV cache tags them (group_idx, kv_cache_spec_kind, the sliding group's window):
 *   the full-attention group every full block of the prompt, the sliding group the window of
 *   blocks that ends them (the checkpoint the prefix cache keeps).
 */
import { decode } from "@msgpack/msgpack";
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { ContextService } from "../../src/online/contextService.ts";
import { tempFolder } from "../helpers/cli.ts";
import { openKvEventsEngine } from "../helpers/kvEventsEngine.ts";
import { writeRandomGguf } from "../helpers/llamaOracle.ts";
import { startEngineServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

const WINDOW = 32;
const scratch = tempFolder("ctxr-gptoss-tiers-");
const file = join(scratch.path, "gptoss.gguf");
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(() => {
  writeRandomGguf("gptoss", file, { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, ffn: 64, extraArgs: ["--sliding-window", String(WINDOW)] });
}, 120_000);
afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  scratch.cleanup();
});

const WORDS = ["stone", "shore", "rain", "heart", "noon", "the", "near", "rests", "hears", "a", "of", "then"];
const DOCUMENTS = [1, 2, 3].map((seed) => ({ id: `d${seed}`, text: Array.from({ length: 48 }, (_, i) => WORDS[(i * (seed + 5) + seed) % WORDS.length]).join(" ") }));

describe("gpt-oss: the chunk cache's disk tier", () => {
  test("chunks written to --kv-dir by one server are reused by the next, with the same answer", async () => {
    const kvDir = join(scratch.path, "kv");
    const options = { kvBlocks: 256, blockSize: 16, prefixCache: false, kvDeviceBlocks: 0, kvDir };
    const request = { model: "gptoss", messages: [{ role: "user", content: "where does the stone rest" }], documents: DOCUMENTS, max_tokens: 4, temperature: 0 };
    const first = await startEngineServer(file, { ...options, kvHostBytes: 0 });
    cleanups.push(() => first.close());
    const a = await first.post("/v1/chat/completions", request);
    expect(a.status).toBe(200);
    expect(first.engine.chunkCache.stats.diskVariants).toBeGreaterThan(0);
    await first.close();
    cleanups.pop();

    const second = await startEngineServer(file, options);
    cleanups.push(() => second.close());
    const b = await second.post("/v1/chat/completions", request);
    expect(b.status).toBe(200);
    const hits = b.body.usage.ctxr.tier_hits as { device: number; host: number; disk: number };
    // From disk, or from memory when the queued request's prefetch got there first.
    expect(hits.disk + hits.host).toBeGreaterThanOrEqual(DOCUMENTS.length);
    expect(b.body.usage.ctxr.prompt_tokens_computed).toBeLessThan(a.body.usage.ctxr.prompt_tokens_computed / 2);
    expect(b.body.choices[0].message.content).toBe(a.body.choices[0].message.content);
  });
});

interface StoredEvent {
  type: "BlockStored";
  block_hashes: Uint8Array[];
  token_ids: number[];
  block_size: number;
  group_idx?: number;
  kv_cache_spec_kind?: string;
  kv_cache_spec_sliding_window?: number | null;
}

describe("gpt-oss: KV events", () => {
  test("a prompt's blocks arrive as BlockStored events of both KV cache groups, tagged with the group", async () => {
    const service = await ContextService.open({ dataDir: null });
    cleanups.push(() => service.close());
    const { engine, publisher, api, peer } = await openKvEventsEngine(service, file, { blockSize: 16 }, cleanups, "tcp://127.0.0.1:0");

    const messages = [{ role: "user", content: DOCUMENTS.map((d) => d.text).join("\n") }];
    const answer = await api.post("/v1/chat/completions", { model: "gptoss", messages, max_tokens: 2, temperature: 0 });
    expect(answer.status).toBe(200);
    await Bun.sleep(50); // the step's last events are batched on the next turn
    const frames = await peer.take("message", publisher.stats.batches);
    const stored = frames.flatMap(([, , payload]) => (decode(payload!) as { events: StoredEvent[] }).events).filter((e) => e.type === "BlockStored");
    const prompt = engine.chatPromptIds(messages);
    const fullBlocks = Math.floor(prompt.length / 16);
    expect(fullBlocks).toBeGreaterThan(WINDOW / 16 + 1);
    const groups = new Map<number, StoredEvent[]>();
    for (const event of stored) {
      expect(event.group_idx).toBeDefined();
      groups.set(event.group_idx!, [...(groups.get(event.group_idx!) ?? []), event]);
    }
    expect([...groups.keys()].sort()).toEqual([0, 1]);
    const tokensOf = (events: StoredEvent[]) => events.flatMap((e) => e.token_ids);
    const [full, sliding] = [0, 1].map((index) => groups.get(index)!);
    for (const event of full!) {
      expect(event).toMatchObject({ kv_cache_spec_kind: "full_attention", block_size: 16 });
      expect(event.kv_cache_spec_sliding_window ?? null).toBeNull(); // omitted as msgspec omits defaults
    }
    for (const event of sliding!) expect(event).toMatchObject({ kv_cache_spec_kind: "sliding_window", kv_cache_spec_sliding_window: WINDOW, block_size: 16 });
    // The full-attention group: every full block of the prompt, from its start.
    expect(tokensOf(full!).slice(0, fullBlocks * 16)).toEqual(prompt.slice(0, fullBlocks * 16));
    // The sliding group: the window's blocks that end the prompt's full blocks (its checkpoint).
    expect(tokensOf(sliding!)).toEqual(prompt.slice(fullBlocks * 16 - WINDOW, fullBlocks * 16));
  });
});
