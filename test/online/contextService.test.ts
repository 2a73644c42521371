import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RequestError } from "../../src/http/requestError.ts";
import { ContextService } from "../../src/online/contextService.ts";

const open: ContextService[] = [];
async function memoryService(options: Partial<Parameters<typeof ContextService.open>[0]> = {}): Promise<ContextService> {
  const service = await ContextService.open({ dataDir: null, ...options });
  open.push(service);
  return service;
}
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
});

describe("ContextService.reorder", () => {
  test("a later context reuses an earlier one's blocks as its prefix; order and annotation say where each block came from", async () => {
    const service = await memoryService({ blockTokens: 100 });
    const first = await service.reorder([[1, 2, 3, 4]]);
    expect(first.results[0]!.prefix_blocks).toBe(0);
    expect(first.results[0]!.blocks).toEqual([1, 2, 3, 4]);

    const second = await service.reorder([[9, 2, 1, 7]]);
    const r = second.results[0]!;
    expect(r.blocks).toEqual([1, 2, 9, 7]);
    expect(r.order).toEqual([2, 1, 0, 3]);
    expect(r.prefix_blocks).toBe(2);
    expect(r.prefix_tokens).toBe(200);
    // Original relevance: 9 (now Doc 3) > 2 (Doc 2) > 1 (Doc 1) > 7 (Doc 4).
    expect(r.annotation).toBe("Please read the context in the following priority order: [Doc 3] > [Doc 2] > [Doc 1] > [Doc 4] and answer the question.");
    expect(r.request_id).toMatch(/^ctxr-[0-9a-f]{32}$/);
    expect(service.stats().contexts).toBe(2);
  });

  test("a batch is ordered so its sharers share, and scheduled together", async () => {
    const service = await memoryService();
    const { results, schedule } = await service.reorder([
      [10, 11, 1],
      [20, 21, 22],
      [1, 12, 13, 11],
      [23, 20, 22],
    ]);
    expect([...schedule].sort()).toEqual([0, 1, 2, 3]);
    const byContext = results.map((r) => r.blocks);
    expect(new Set(byContext[0]!.slice(0, 2))).toEqual(new Set([1, 11]));
    expect(byContext[2]!.slice(0, 2)).toEqual(byContext[0]!.slice(0, 2));
    expect(new Set(byContext[1]!.slice(0, 2))).toEqual(new Set([20, 22]));
    const sharerPositions = [schedule.indexOf(0), schedule.indexOf(2)].sort();
    expect(sharerPositions[1]! - sharerPositions[0]!).toBe(1);
    expect(results[0]!.prefix_blocks + results[2]!.prefix_blocks).toBe(2);
  });

  test("the schedule runs each context after the ones whose blocks it reuses", async () => {
    const service = await memoryService();
    const { results, schedule } = await service.reorder([[1, 2, 3], [3, 2, 9]]);
    const sharer = results.findIndex((r) => r.prefix_blocks > 0);
    expect(sharer).toBeGreaterThanOrEqual(0);
    expect(schedule.indexOf(sharer)).toBe(1);
  });

  test("text blocks are the same block when their text differs only in whitespace; templates apply", async () => {
    const service = await memoryService();
    await service.reorder([[{ text: "The  cat\nsat." }, { text: "Dogs bark." }]]);
    const again = await service.reorder([[{ text: "Birds fly." }, { text: " The cat sat. " }]], undefined, { doc: "<{n}>", separator: ", ", priority: "Order: {order}" });
    expect(again.results[0]!.blocks).toEqual([{ text: " The cat sat. " }, { text: "Birds fly." }]);
    expect(again.results[0]!.prefix_blocks).toBe(1);
    expect(again.results[0]!.annotation).toBe("Order: <2>, <1>");
  });

  test("a block repeated inside one context is a client error naming the field", async () => {
    const service = await memoryService();
    const attempt = service.reorder([[1, 2], [3, "x", { id: "x" }]]);
    await expect(attempt).rejects.toBeInstanceOf(RequestError);
    await expect(attempt).rejects.toThrow('contexts[1][2]: block "x" appears twice in one context');
    expect(service.stats().contexts).toBe(0);
  });

  test("the capacity model evicts least-recently-used contexts", async () => {
    const service = await memoryService({ capacityTokens: 3, blockTokens: 1 });
    await service.reorder([[1, 2]]);
    await service.reorder([[3, 4]]);
    expect(service.stats().contexts).toBe(1);
    expect(service.stats().index_tokens).toBeLessThanOrEqual(3);
  });
});

describe("ContextService.dedup and evict", () => {
  test("blocks sent earlier in a conversation become location annotations; conversations are isolated", async () => {
    const service = await memoryService();
    const turn1 = await service.dedup("c1", [5, 6, 7]);
    expect(turn1).toEqual({ blocks: [5, 6, 7], duplicates: [] });
    const turn2 = await service.dedup("c1", [8, 6, 5]);
    expect(turn2.blocks).toEqual([8, "Please refer to [Doc 2] in the previous conversation.", "Please refer to [Doc 1] in the previous conversation."]);
    expect(turn2.duplicates).toEqual([6, 5]);
    expect((await service.dedup("c2", [6])).duplicates).toEqual([]);
  });

  test("reorder with a conversation id records what was sent for later dedup", async () => {
    const service = await memoryService();
    await service.reorder([[4, 3]], "conv");
    const turn = await service.dedup("conv", [3, 9]);
    expect(turn.blocks[0]).toBe("Please refer to [Doc 2] in the previous conversation.");
  });

  test("evict accepts the id forms engines report", async () => {
    const service = await memoryService();
    const ids = (await service.reorder([[1], [2], [3], [4]])).results.map((r) => r.request_id);
    const reported = [ids[0]!, `cmpl-${ids[1]}`, `chatcmpl-${ids[2]}`, `cmpl-${ids[3]}-0-1a2b3c4d`, "unknown", ids[0]!];
    expect(await service.evict(reported)).toEqual({ evicted: 4 });
    expect(service.stats().contexts).toBe(0);
  });

  test("schedule is stateless and equals the offline build", async () => {
    const service = await memoryService();
    const contexts = [[1, 2, 3], [3, 2, 9], [7, 8]];
    const scheduled = service.schedule(contexts);
    expect(scheduled.results[1]!.blocks.slice(0, 2)).toEqual(scheduled.results[0]!.blocks.slice(0, 2));
    expect(service.stats().contexts).toBe(0);
    expect(scheduled.schedule).toHaveLength(3);
  });
});

describe("ContextService persistence", () => {
  test("changes survive a restart on the same data dir", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ctxr-service-"));
    try {
      const first = await ContextService.open({ dataDir: dir });
      const ids = (await first.reorder([[1, 2, 3], [1, 2, 4]])).results.map((r) => r.request_id);
      await first.dedup("c", [1, 5]);
      await first.evict([ids[1]!]);
      await first.close();

      const second = await ContextService.open({ dataDir: dir });
      expect(second.stats().contexts).toBe(1);
      expect((await second.dedup("c", [5])).duplicates).toEqual([5]);
      expect((await second.reorder([[3, 1, 2, 8]])).results[0]!.prefix_blocks).toBe(3);
      expect(await second.evict([ids[0]!, ids[1]!])).toEqual({ evicted: 1 });
      await second.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("ContextService limits and budgets", () => {
  const amplifying = { priority: "{order}{order}{order}{order}", doc: "{n}{n}{n}{n}" + "d".repeat(4000), separator: "s".repeat(4000) };

  test("a reorder whose annotations would pass --max-annotation-bytes is refused and changes nothing", async () => {
    const service = await memoryService({ maxAnnotationBytes: 1_000_000 });
    const blocks = Array.from({ length: 1024 }, (_, i) => `doc-${i}`);
    let error: unknown;
    try {
      await service.reorder([blocks], "conv", amplifying);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(RequestError);
    expect((error as RequestError).field).toBe("templates");
    expect((error as Error).message).toContain("--max-annotation-bytes");
    expect((error as Error).message).toContain("1000000");
    const stats = service.stats();
    expect([stats.contexts, stats.distinct_blocks, stats.conversations, stats.reordered_contexts]).toEqual([0, 0, 0, 0]);
    // Within the limit, the same templates are fine.
    const small = await service.reorder([blocks.slice(0, 10)], "conv", amplifying);
    expect(Buffer.byteLength(small.results[0]!.annotation)).toBeLessThanOrEqual(1_000_000);
  });

  test("a dedup turn whose notes would pass the limit is refused and records nothing", async () => {
    const service = await memoryService({ maxAnnotationBytes: 50_000 });
    const blocks = Array.from({ length: 100 }, (_, i) => `doc-${i}`);
    await service.dedup("c", blocks, { doc: "[D {n}]" + "x".repeat(400) });
    const before = service.stats();
    await expect(service.dedup("c", [...blocks, "new"], { dedup: "{doc}{doc}{doc}" })).rejects.toThrow("--max-annotation-bytes");
    expect(service.sentBefore("c", ["new"])).toEqual([undefined]);
    expect(service.stats().dedup_blocks).toBe(before.dedup_blocks);
    // One note per duplicate at the default template fits.
    const ok = await service.dedup("c", [...blocks, "new"]);
    expect(ok.duplicates.length).toBe(100);
  });

  test("the index and its block keys stay within --max-index-bytes; least recently used contexts go", async () => {
    const maxIndexBytes = 2_000_000;
    const service = await memoryService({ maxIndexBytes });
    let last: string | null = null;
    for (let round = 0; round < 200; round++) {
      const contexts = Array.from({ length: 4 }, (_, c) => Array.from({ length: 50 }, (_, b) => `round-${round}-ctx-${c}-block-${b}-${"k".repeat(60)}`));
      const { results } = await service.reorder(contexts);
      last = results[3]!.request_id;
      const stats = service.stats();
      expect(stats.index_bytes).toBeLessThanOrEqual(maxIndexBytes);
    }
    const stats = service.stats();
    expect(stats.index_budget_evicted_contexts).toBeGreaterThan(600);
    expect(stats.evicted_contexts).toBe(stats.index_budget_evicted_contexts);
    // Block keys of evicted contexts are released: far fewer than the 40,000 sent.
    expect(stats.distinct_blocks).toBeLessThan(10_000);
    expect(stats.distinct_blocks).toBeGreaterThan(0);
    // The newest context is still there and its blocks are reused as a prefix.
    const again = await service.reorder([Array.from({ length: 50 }, (_, b) => `round-199-ctx-3-block-${b}-${"k".repeat(60)}`)]);
    expect(again.results[0]!.prefix_blocks).toBe(50);
    expect((await service.evict([last!])).evicted).toBe(1);
  });

  test("dedup records stay within --max-dedup-bytes: least recently used conversations are forgotten whole", async () => {
    const service = await memoryService({ maxDedupBytes: 1_000_000 });
    for (let c = 0; c < 100; c++) await service.dedup(`conv-${c}`, Array.from({ length: 100 }, (_, b) => `c${c}-b${b}-${"x".repeat(100)}`));
    const stats = service.stats();
    expect(stats.dedup_bytes).toBeLessThanOrEqual(1_000_000);
    expect(stats.dedup_budget_evicted_conversations).toBeGreaterThan(0);
    expect(stats.conversations).toBe(100 - stats.dedup_budget_evicted_conversations);
    // The newest conversation still deduplicates; the oldest was forgotten.
    expect((await service.dedup("conv-99", ["c99-b0-" + "x".repeat(100)])).duplicates.length).toBe(1);
    expect((await service.dedup("conv-0", ["c0-b0-" + "x".repeat(100)])).duplicates.length).toBe(0);
  });

  test("reset releases the index, keys and conversations", async () => {
    const service = await memoryService();
    const empty = service.stats();
    await service.reorder([Array.from({ length: 500 }, (_, i) => `b${i}`)], "c");
    expect(service.stats().index_bytes).toBeGreaterThan(empty.index_bytes);
    await service.reset();
    const after = service.stats();
    expect([after.index_bytes, after.dedup_bytes, after.distinct_blocks, after.conversations]).toEqual([empty.index_bytes, 0, 0, 0]);
  });

  test("a journal replayed under a smaller budget keeps only what fits", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ctxr-budget-"));
    try {
      const big = await ContextService.open({ dataDir: dir, maxIndexBytes: null });
      for (let i = 0; i < 300; i++) await big.reorder([Array.from({ length: 20 }, (_, b) => `ctx${i}-b${b}`)]);
      await big.close();
      const small = await ContextService.open({ dataDir: dir, maxIndexBytes: 300_000 });
      const stats = small.stats();
      await small.close();
      expect(stats.index_bytes).toBeLessThanOrEqual(300_000);
      expect(stats.contexts).toBeGreaterThan(0);
      expect(stats.contexts).toBeLessThan(300);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
