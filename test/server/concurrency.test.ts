/**
 * Concurrency: 2,000 reorder/evict/dedup requests, 64 in flight, against a
 * journaled server. No errors; the final state matches what was acknowledged,
 * and so does the state recovered from the journal.
 */
import { afterAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT, tempFolder } from "../helpers/cli.ts";
import { seededRandom } from "../helpers/randomContexts.ts";
import { startTestServer } from "./serverKit.ts";

const TOTAL = 2000;
const IN_FLIGHT = 64;

const folder = tempFolder("ctxr-concurrency-");
afterAll(() => folder.cleanup());

const workload = readFileSync(join(REPO_ROOT, "samples/zipf_N2000_k15.jsonl"), "utf8")
  .trim()
  .split("\n")
  .map((line) => JSON.parse(line) as number[]);

test(`${TOTAL} concurrent reorder/evict/dedup requests (${IN_FLIGHT} in flight): no errors, state consistent with what was acknowledged`, async () => {
  const dataDir = join(folder.path, "data");
  const server = await startTestServer({ service: { dataDir, snapshotEvery: 500 } });
  const random = seededRandom(7);
  const live: string[] = [];
  let inserted = 0;
  let evicted = 0;
  let dedupBlocks = 0;
  const conversations = new Set<string>();
  const seenByConversation = new Map<string, Set<number>>();
  const failures: string[] = [];
  let issued = 0;

  const worker = async () => {
    while (issued < TOTAL) {
      issued++;
      const roll = random();
      if (roll < 0.55 || live.length === 0) {
        const count = 1 + Math.floor(random() * 3);
        const contexts = Array.from({ length: count }, () => workload[Math.floor(random() * workload.length)]!);
        const answer = await server.post("/v1/reorder", { contexts });
        if (answer.status !== 200) {
          failures.push(`reorder ${answer.status} ${answer.text}`);
          continue;
        }
        inserted += answer.body.results.length;
        for (const r of answer.body.results) live.push(r.request_id);
      } else if (roll < 0.8) {
        // Evict a few ids, some of them possibly evicted already by another request in flight.
        const ids = Array.from({ length: 1 + Math.floor(random() * 3) }, () => live[Math.floor(random() * live.length)]!);
        const decorated = ids.map((id) => pick(random, [id, `chatcmpl-${id}`, `cmpl-${id}-0-abcdef12`]));
        const answer = await server.post("/v1/evict", { request_ids: decorated });
        if (answer.status !== 200) {
          failures.push(`evict ${answer.status} ${answer.text}`);
          continue;
        }
        evicted += answer.body.evicted;
      } else {
        const conversation = `conv-${Math.floor(random() * 20)}`;
        const blocks = workload[Math.floor(random() * workload.length)]!;
        const answer = await server.post("/v1/dedup", { conversation_id: conversation, blocks });
        if (answer.status !== 200) {
          failures.push(`dedup ${answer.status} ${answer.text}`);
          continue;
        }
        conversations.add(conversation);
        dedupBlocks += blocks.length;
        // Another request of the same conversation may be in flight, so only blocks this
        // conversation had before this request was sent must come back as duplicates.
        const seen = seenByConversation.get(conversation) ?? new Set<number>();
        for (const b of answer.body.duplicates as number[]) expect(blocks).toContain(b);
        for (const b of blocks) seen.add(b);
        seenByConversation.set(conversation, seen);
      }
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));

  expect(failures).toEqual([]);
  const stats = (await server.get("/v1/stats")).body;
  expect(stats.contexts).toBe(inserted - evicted);
  expect(stats.reordered_contexts).toBe(inserted);
  expect(stats.evicted_contexts).toBe(evicted);
  expect(stats.conversations).toBe(conversations.size);
  expect(stats.dedup_blocks).toBe(dedupBlocks);

  // Every conversation knows every block it was sent.
  for (const [conversation, seen] of seenByConversation) {
    const blocks = [...seen].slice(0, 50);
    const answer = await server.post("/v1/dedup", { conversation_id: conversation, blocks });
    expect(answer.body.duplicates).toEqual(blocks);
  }

  // The journal holds the same state.
  await server.close();
  const reopened = await startTestServer({ service: { dataDir } });
  try {
    const recovered = (await reopened.get("/v1/stats")).body;
    expect(recovered.contexts).toBe(inserted - evicted);
    expect(recovered.nodes).toBe(stats.nodes);
    expect(recovered.index_tokens).toBe(stats.index_tokens);
    expect(recovered.conversations).toBe(conversations.size);
    // Each id still in the index is evicted exactly once; the rest are gone.
    const all = [...new Set(live)];
    expect((await reopened.post("/v1/evict", { request_ids: all })).body.evicted).toBe(inserted - evicted);
    expect((await reopened.post("/v1/evict", { request_ids: all })).body.evicted).toBe(0);
    const empty = (await reopened.get("/v1/stats")).body;
    expect(empty).toMatchObject({ contexts: 0, nodes: 1, index_tokens: 0 });
  } finally {
    await reopened.close();
  }
});

function pick<T>(random: () => number, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)]!;
}
