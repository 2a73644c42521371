/**
 * The fake engine: its OpenAI answers report cached tokens from a real LRU of chained blocks,
 * its true contents follow stores and evictions, and its events (read back by a libzmq
 * subscriber) say exactly what changed.
 */
import { decode } from "@msgpack/msgpack";
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { cleanupAfterEach } from "../helpers/testLifecycle.ts";
import { promptBlockHashes } from "../../src/kv/prefixBlockCache.ts";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";
import { FakeEngine } from "../helpers/fakeEngine/fakeEngine.ts";
import { simpleTokenizer } from "../helpers/fakeEngine/fakeTokenizer.ts";
import { sleep } from "../../src/runtime/sleep.ts";

setDefaultTimeout(30_000);

const cleanup = cleanupAfterEach();

async function engine(options: Parameters<typeof FakeEngine.start>[0] = {}): Promise<FakeEngine> {
  const started = await FakeEngine.start(options);
  cleanup(() => started.close());
  return started;
}

async function post(url: string, body: unknown): Promise<any> {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  expect(response.status).toBe(200);
  return response.headers.get("content-type")?.startsWith("text/event-stream") ? response.text() : response.json();
}

describe("FakeEngine", () => {
  test("the simple tokenizer is deterministic and a prompt that extends another starts with its tokens", () => {
    const short = simpleTokenizer.promptIds("The river flows past the old mill.");
    const long = simpleTokenizer.promptIds("The river flows past the old mill. Then it turns north.");
    expect(short.length).toBe(8);
    expect(long.slice(0, short.length)).toEqual(short);
    expect(simpleTokenizer.promptIds("The river flows past the old mill.")).toEqual(short);
  });

  test("cached_tokens: whole blocks of the longest cached prefix, never the last prompt token; streamed usage too", async () => {
    const fake = await engine({ blockSize: 4 });
    const prompt = "one two three four five six seven eight nine ten eleven twelve";
    const ids = fake.promptIds(prompt);
    expect(ids.length).toBe(12);
    const first = await post(`${fake.url}/v1/completions`, { prompt, max_tokens: 4 });
    expect(first.usage).toEqual({ prompt_tokens: 12, completion_tokens: first.usage.completion_tokens, total_tokens: 12 + first.usage.completion_tokens, prompt_tokens_details: { cached_tokens: 0 } });
    expect(first.choices[0].text).toBe("This is the fake engine's answer.");
    // The same prompt: 3 blocks cached, but the last token is computed, so 2 blocks count.
    expect((await post(`${fake.url}/v1/completions`, { prompt })).usage.prompt_tokens_details.cached_tokens).toBe(8);
    // Token ids work as a prompt too, and a longer prompt finds all 3 blocks.
    expect((await post(`${fake.url}/v1/completions`, { prompt: [...ids, 99, 98] })).usage.prompt_tokens_details.cached_tokens).toBe(12);
    const streamed: string = await post(`${fake.url}/v1/completions`, { prompt, stream: true, stream_options: { include_usage: true } });
    const chunks = streamed.split("\n\n").filter((part) => part.startsWith("data: {")).map((part) => JSON.parse(part.slice(6)));
    expect(chunks.at(-1).usage.prompt_tokens_details.cached_tokens).toBe(8);
    expect(streamed.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(fake.stats).toEqual({ requests: 4, promptTokens: 12 + 12 + 14 + 12, cachedTokens: 0 + 8 + 12 + 8 });
  });

  test("chat prompts go through the chat rendering; a real tokenizer folder's template is used when given", async () => {
    const model = tinyModelFolder({ layers: 1 }, "fake-engine-tokenizer");
    cleanup(() => model.cleanup());
    const fake = await engine({ blockSize: 4, tokenizerDir: model.path });
    const messages = [{ role: "user", content: "What is in the document about rivers and mills?" }];
    const first = await post(`${fake.url}/v1/chat/completions`, { messages });
    expect(first.choices[0].message).toEqual({ role: "assistant", content: "This is the fake engine's answer." });
    const ids = fake.promptIds(messages);
    // The byte tokenizer's Llama-2 template: <s>[INST] ... [/INST], one token per byte.
    expect(first.usage.prompt_tokens).toBe(ids.length);
    expect(ids.length).toBe(1 + "[INST] ".length + messages[0]!.content.length + " [/INST]".length);
    const second = await post(`${fake.url}/v1/chat/completions`, { messages, stream: true, stream_options: { include_usage: true } });
    expect(second).toContain(`"cached_tokens":${Math.floor((ids.length - 1) / 4) * 4}`);
  });

  test("the true contents follow stores and least-recently-used evictions (leaves first), and a prompt's answer is cached with it", async () => {
    const fake = await engine({ blockSize: 2, capacityBlocks: 4 });
    fake.process([1, 2, 3, 4], [5, 6]);
    const a = promptBlockHashes("fake-engine", [1, 2, 3, 4, 5, 6], 2);
    expect([...fake.blocks.keys()]).toEqual(a);
    expect(fake.blocks.get(a[1]!)).toEqual({ parent: a[0]!, tokens: [3, 4] });
    fake.process([7, 8, 9, 10]);
    const b = promptBlockHashes("fake-engine", [7, 8, 9, 10], 2);
    // One block made room: the least recently used leaf, the first sequence's last block.
    expect(new Set(fake.blocks.keys())).toEqual(new Set([a[0]!, a[1]!, b[0]!, b[1]!]));
    expect(fake.process([1, 2, 3, 4, 0])).toBe(4);
  });

  test("events for a libzmq subscriber: BlockStored with parent and tokens, BlockRemoved, AllBlocksCleared on a restart, in the chosen layout", async () => {
    const fake = await engine({ blockSize: 2, capacityBlocks: 2, kvEvents: { layout: "array", hashes: "int" } });
    const peer = await ZmqPeer.subscribe(fake.kvEventsEndpoint!);
    cleanup(() => peer.close());
    for (let i = 0; i < 200 && fake.kvEvents.stats.subscribers === 0; i++) await sleep(10);
    fake.process([1, 2, 3, 4]);
    fake.kvEvents.flush();
    fake.process([5, 6]);
    fake.kvEvents.flush();
    await fake.restart({ reconnect: false, clearEvent: true });
    fake.kvEvents.flush();
    const messages = (await peer.take("message", 3)).map((frames) => decode(frames[2]!, { useBigInt64: true }) as unknown[]);
    const [a, b] = promptBlockHashes("fake-engine", [1, 2, 3, 4], 2).map((hash) => BigInt(`0x${hash.slice(16)}`));
    const [c] = promptBlockHashes("fake-engine", [5, 6], 2).map((hash) => BigInt(`0x${hash.slice(16)}`));
    expect(messages[0]![1]).toEqual([["BlockStored", [a, b], null, [1, 2, 3, 4], 2, null, "GPU"]]);
    expect(messages[1]![1]).toEqual([
      ["BlockRemoved", [b], "GPU"],
      ["BlockStored", [c], null, [5, 6], 2, null, "GPU"],
    ]);
    expect(messages[2]![1]).toEqual([["AllBlocksCleared"]]);
    expect(fake.blocks.size).toBe(0);
    expect(fake.faults.dropped).toBe(0);
  });
});
