/**
 * KV events out, end to end (issue 19 item 5): the real engine (CPU runner, tiny model) and HTTP
 * server with a publisher, and a libzmq SUB socket (zmqPeer.mjs under Node) decoding vLLM's
 * layout: a request's prompt blocks arrive as chained BlockStored events; a prompt served from
 * the cache stores nothing new; a small cache's evictions arrive as BlockRemoved for blocks
 * stored before, so the subscriber's view equals what the engine holds; replay; engines of
 * different models or block sizes name the same prompt differently; `ctxr serve` wiring.
 */
import { decode } from "@msgpack/msgpack";
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { ContextService } from "../../src/online/contextService.ts";
import type { KvEventPublisher } from "../../src/server/kvEventPublisher.ts";
import type { RunningServer } from "../../src/server/serve.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { openKvEventsEngine } from "../helpers/kvEventsEngine.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";
import { spawnServer, type Client } from "./serverKit.ts";

setDefaultTimeout(120_000);

interface StoredEvent {
  type: "BlockStored";
  block_hashes: Uint8Array[];
  parent_block_hash: Uint8Array | null;
  token_ids: number[];
  block_size: number;
  lora_id: null;
  medium: string;
  lora_name: null;
}
type Event = StoredEvent | { type: "BlockRemoved"; block_hashes: Uint8Array[]; medium: string } | { type: "AllBlocksCleared" };
interface Batch {
  seq: bigint;
  events: Event[];
}

const key = (hash: Uint8Array) => Buffer.from(hash).toString("hex");
const seqOf = (frame: Uint8Array) => new DataView(frame.buffer, frame.byteOffset, 8).getBigInt64(0, false);
function batches(messages: Uint8Array[][]): Batch[] {
  return messages.map(([, seq, payload]) => ({ seq: seqOf(seq!), events: (decode(payload!) as { events: Event[] }).events }));
}
const storedOf = (all: Batch[]) => all.flatMap((b) => b.events.filter((e): e is StoredEvent => e.type === "BlockStored"));

let runnerPath = "";
let modelA: { path: string; cleanup(): void };
let modelB: { path: string; cleanup(): void };
let service: ContextService;
const cleanups: (() => Promise<void> | void)[] = [];

interface Opened {
  engine: GenerationEngine;
  publisher: KvEventPublisher;
  server: RunningServer;
  api: Client;
  peer: ZmqPeer;
  /** Messages taken from `peer` so far. */
  received: number;
}

/** The messages published since the last call (as many as the publisher counts), once they arrive. */
async function newMessages(opened: Opened): Promise<Uint8Array[][]> {
  await Bun.sleep(50); // the step's last events are batched on the next turn
  const want = opened.publisher.stats.batches - opened.received;
  opened.received += want;
  return await opened.peer.take("message", want);
}

async function open(model: string, options: Partial<Parameters<typeof GenerationEngine.open>[0]> = {}): Promise<Opened> {
  return { ...(await openKvEventsEngine(service, model, { runner: runnerPath, ...options }, cleanups)), received: 0 };
}

beforeAll(async () => {
  runnerPath = buildRunner();
  modelA = tinyModelFolder({ layers: 2, seed: 21 }, "tiny-events-a");
  modelB = tinyModelFolder({ layers: 2, seed: 22 }, "tiny-events-b");
  service = await ContextService.open({ dataDir: null });
}, 300_000);

afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await service?.close();
  modelA?.cleanup();
  modelB?.cleanup();
});

const MESSAGES = [
  { role: "system", content: "You answer questions about the valley." },
  { role: "user", content: "When does the river Ouse flood, and what happens to the mill by the old bridge?" },
];

describe("KV events from the engine", () => {
  let a: Opened;
  const seen: Batch[] = [];
  const live: Uint8Array[][] = [];
  beforeAll(async () => {
    a = await open(modelA.path, { kvBlocks: 24 });
  });

  test("a chat request's full prompt blocks arrive as BlockStored events chained from the first, seq from 0", async () => {
    const answer = await a.api.post("/v1/chat/completions", { messages: MESSAGES, max_tokens: 3, temperature: 0 });
    expect(answer.status).toBe(200);
    const messages = await newMessages(a);
    live.push(...messages);
    const got = batches(messages);
    seen.push(...got);
    expect(got.map((b) => b.seq)).toEqual(got.map((_, i) => BigInt(i)));
    const stored = storedOf(got);
    const blockSize = a.engine.info.block_size;
    const prompt = a.engine.chatPromptIds(MESSAGES);
    const full = Math.floor(prompt.length / blockSize) * blockSize;
    expect(full).toBeGreaterThanOrEqual(2 * blockSize);
    // One sequence: each event chains from the one before; the first starts the prompt.
    expect(stored[0]!.parent_block_hash).toBeNull();
    for (let i = 1; i < stored.length; i++) expect(key(stored[i]!.parent_block_hash!)).toBe(key(stored[i - 1]!.block_hashes.at(-1)!));
    const tokens = stored.flatMap((e) => e.token_ids);
    expect(tokens.slice(0, full)).toEqual(prompt.slice(0, full));
    expect(tokens.length).toBeLessThanOrEqual(prompt.length + 3);
    for (const event of stored) {
      expect(event).toMatchObject({ block_size: blockSize, lora_id: null, medium: "GPU", lora_name: null });
      expect(event.token_ids.length).toBe(event.block_hashes.length * blockSize);
      for (const hash of event.block_hashes) expect(hash.length).toBe(16);
    }
    // The subscriber's view is what the engine's prefix cache holds.
    expect(stored.flatMap((e) => e.block_hashes).length).toBe(a.engine.stats.kvBlocksPrefixCached);
  });

  test("the same prompt again hits the cache: none of its blocks is stored again", async () => {
    const before = new Set(storedOf(seen).flatMap((e) => e.block_hashes.map(key)));
    const again = await a.api.post("/v1/chat/completions", { messages: MESSAGES, max_tokens: 3, temperature: 0 });
    expect(again.body.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    const messages = await newMessages(a);
    live.push(...messages);
    const got = batches(messages);
    seen.push(...got);
    for (const hash of storedOf(got).flatMap((e) => e.block_hashes.map(key))) expect(before.has(hash)).toBe(false);
    expect(seen.map((b) => b.seq)).toEqual(seen.map((_, i) => BigInt(i)));
  });

  test("a small cache's evictions arrive as BlockRemoved for blocks stored before; the subscriber's view stays the engine's", async () => {
    const held = new Set<string>();
    const apply = (all: Batch[]) => {
      for (const event of all.flatMap((b) => b.events)) {
        if (event.type === "AllBlocksCleared") held.clear();
        else if (event.type === "BlockStored") for (const hash of event.block_hashes) held.add(key(hash));
        else
          for (const hash of event.block_hashes) {
            expect(held.has(key(hash))).toBe(true);
            held.delete(key(hash));
          }
      }
    };
    apply(seen);
    let removed = 0;
    for (let i = 0; i < 6; i++) {
      const prompt = `Note ${i}: ${"the embankment keeper walks along the bridge at dawn ".repeat(3)}and counts the boats, ${i} times over.`;
      expect((await a.api.post("/v1/completions", { prompt, max_tokens: 2, temperature: 0 })).status).toBe(200);
      const messages = await newMessages(a);
      live.push(...messages);
      const got = batches(messages);
      seen.push(...got);
      apply(got);
      removed += got.flatMap((b) => b.events).filter((e) => e.type === "BlockRemoved").length;
      expect(held.size).toBe(a.engine.stats.kvBlocksPrefixCached);
    }
    expect(removed).toBeGreaterThan(0);
    expect(held.size).toBeLessThanOrEqual(24);
    expect(seen.map((b) => b.seq)).toEqual(seen.map((_, i) => BigInt(i)));
    expect(a.publisher.stats.batches).toBe(seen.length);
    const metrics = await (await fetch(`${a.server.url}/metrics`)).text();
    expect(metrics).toContain(`ctxr_kv_events_batches_total ${seen.length}\n`);
    expect(metrics).toContain("ctxr_kv_events_subscribers 1\n");
  });

  test("replay from a sequence number returns the batches published since, as they were, then the end marker", async () => {
    expect(live.length).toBeGreaterThan(3);
    a.peer.requestReplay(a.publisher.replayEndpoint!, 2);
    const replayed = await a.peer.take("replay", live.length - 2 + 1);
    expect(await a.peer.drain("replay")).toEqual([]);
    expect(replayed.slice(0, -1)).toEqual(live.slice(2).map(([, seq, payload]) => [seq!, payload!]));
    expect(replayed.at(-1)).toEqual([new Uint8Array(8).fill(0xff), new Uint8Array(0)]);
  });
});

describe("hashes name a prompt for one model and KV layout", () => {
  test("another model, or another block size, publishes other hashes for the same prompt; the same model the same ones", async () => {
    const prompt = "The mill closes for a month every spring, when the river floods the valley floor.";
    const hashes = async (opened: Opened) => {
      expect((await opened.api.post("/v1/completions", { prompt, max_tokens: 1, temperature: 0 })).status).toBe(200);
      const stored = storedOf(batches(await newMessages(opened)));
      expect(stored.length).toBeGreaterThan(0);
      return stored.flatMap((e) => e.block_hashes.map(key));
    };
    const first = await hashes(await open(modelA.path, { kvBlocks: 64 }));
    const sameModel = await hashes(await open(modelA.path, { kvBlocks: 64 }));
    const otherModel = await hashes(await open(modelB.path, { kvBlocks: 64 }));
    const otherBlockSize = await hashes(await open(modelA.path, { kvBlocks: 64, blockSize: 32 }));
    expect(sameModel).toEqual(first);
    for (const other of [otherModel, otherBlockSize]) for (const hash of other) expect(first).not.toContain(hash);
  });
});

describe("ctxr serve --kv-events-publish", () => {
  test("binds, says where, publishes what a request stores, counts it in /metrics", async () => {
    const server = await spawnServer(["--in-memory", "--model", modelA.path, "--kv-blocks", "64", "--threads", "1", "--kv-events-publish", "tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0,hashes=int"]);
    try {
      const line = server.startLines.find((l) => l.startsWith("ctxr serve: publishing KV events on "));
      const match = /^ctxr serve: publishing KV events on (tcp:\/\/127\.0\.0\.1:\d+) \(replay: (tcp:\/\/127\.0\.0\.1:\d+)\)$/.exec(line ?? "");
      expect(match).not.toBeNull();
      const peer = await ZmqPeer.subscribe(match![1]!);
      try {
        for (let i = 0; i < 100 && !(await (await fetch(`${server.url}/metrics`)).text()).includes("ctxr_kv_events_subscribers 1\n"); i++) await Bun.sleep(50);
        expect((await server.post("/v1/completions", { prompt: "x".repeat(40), max_tokens: 1, temperature: 0 })).status).toBe(200);
        await Bun.sleep(50);
        const published = Number(/ctxr_kv_events_batches_total (\d+)/.exec(await (await fetch(`${server.url}/metrics`)).text())?.[1]);
        expect(published).toBeGreaterThan(0);
        const got = batches(await peer.take("message", published));
        expect(got[0]!.seq).toBe(0n);
        const stored = storedOf(got);
        expect(stored.length).toBeGreaterThan(0);
        // hashes=int: unsigned integers (decoded as numbers or bigints), not bytes.
        for (const hash of stored[0]!.block_hashes) expect(["number", "bigint"]).toContain(typeof hash);
        expect(await (await fetch(`${server.url}/metrics`)).text()).toContain("ctxr_kv_events_total ");
      } finally {
        await peer.close();
      }
    } finally {
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
    }
  });
});
