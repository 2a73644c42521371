/**
 * What the prefix-cache simulator predicts for the proxy's reordering (scripts/bench-prefix-cache.ts,
 * part 5): each request's blocks reordered through a live index request by request, in arrival
 * order, as `ctxr serve --upstream` does (ContextService.reorder of one context, no run-order
 * scheduling), against the input order; a block a document, LRU at `capacityShare` of all block
 * references, the index told the same capacity.
 */
import { simulatePrefixCache } from "../src/index/prefixCacheSimulator.ts";
import { ContextService } from "../src/online/contextService.ts";

export interface OnlineReorderSimulation {
  inputOrderHitRatio: number;
  reorderedHitRatio: number;
}

export async function simulateOnlineReorder(contexts: readonly (readonly (number | string)[])[], capacityShare: number): Promise<OnlineReorderSimulation> {
  const dense = new Map<number | string, number>();
  const numbered = contexts.map((blocks) => blocks.map((id) => dense.get(id) ?? (dense.set(id, dense.size), dense.size - 1)));
  const capacityTokens = Math.round(capacityShare * numbered.reduce((n, blocks) => n + blocks.length, 0));
  const service = await ContextService.open({ dataDir: null, blockTokens: 1, capacityTokens });
  const reordered: number[][] = [];
  for (const blocks of numbered) reordered.push((await service.reorder([blocks])).results[0]!.blocks as number[]);
  await service.close();
  const options = { blockTokens: 1, capacityTokens };
  return { inputOrderHitRatio: simulatePrefixCache(numbered, options).hitRatio, reorderedHitRatio: simulatePrefixCache(reordered, options).hitRatio };
}
