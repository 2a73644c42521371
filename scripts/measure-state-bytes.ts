/**
 * Measures the live heap bytes that client-grown state takes per entry, to
 * check the estimates of src/online/memoryEstimates.ts: for each kind of
 * state, fills it through the real classes, then prints measured heap growth
 * next to the estimate (ratio > 1: the estimate is low).
 *
 *   npx bun scripts/measure-state-bytes.ts
 */
import { heapSize } from "bun:jsc";
import { ContextService } from "../src/online/contextService.ts";
import { HistoryStore } from "../src/online/historyStore.ts";

function liveHeap(): number {
  Bun.gc(true);
  Bun.gc(true);
  return heapSize();
}

async function measure(name: string, fill: () => Promise<number>): Promise<void> {
  const before = liveHeap();
  const estimated = await fill();
  const measured = liveHeap() - before;
  console.log(`${name.padEnd(44)} measured ${(measured / 1e6).toFixed(1).padStart(7)} MB  estimated ${(estimated / 1e6).toFixed(1).padStart(7)} MB  ratio ${(measured / estimated).toFixed(2)}`);
}

const keep: unknown[] = [];

await measure("index: 20,000 contexts of 16 distinct ids", async () => {
  const service = await ContextService.open({ dataDir: null, maxIndexBytes: null });
  keep.push(service);
  for (let i = 0; i < 1250; i++) {
    await service.reorder(Array.from({ length: 16 }, (_, c) => Array.from({ length: 16 }, (_, b) => `doc-${i}-${c}-${b}`)));
  }
  return service.stats().index_bytes;
});

await measure("index: 20,000 contexts sharing 8 of 16 ids", async () => {
  const service = await ContextService.open({ dataDir: null, maxIndexBytes: null });
  keep.push(service);
  for (let i = 0; i < 1250; i++) {
    await service.reorder(Array.from({ length: 16 }, (_, c) => Array.from({ length: 16 }, (_, b) => (b < 8 ? `shared-${c % 50}-${b}` : `doc-${i}-${c}-${b}`))));
  }
  return service.stats().index_bytes;
});

await measure("dedup: 2,000 conversations x 100 ids of 40 chars", async () => {
  const service = await ContextService.open({ dataDir: null, maxDedupBytes: null });
  keep.push(service);
  for (let c = 0; c < 2000; c++) await service.dedup(`conversation-${c}`, Array.from({ length: 100 }, (_, b) => `block-${c}-${b}-${"x".repeat(24)}`));
  return service.stats().dedup_bytes;
});

await measure("history: 2,000 conversations x 4 messages of 2 KB", async () => {
  const store = new HistoryStore({ maxBytes: null });
  keep.push(store);
  for (let c = 0; c < 2000; c++) {
    store.remember(
      `conversation-${c}`,
      Array.from({ length: 4 }, (_, m) => [`key-${c}-${m}-${"k".repeat(40)}`, `message ${c} ${m} ${"w".repeat(2000)}`.slice(0)]),
    );
  }
  return store.bytes;
});
