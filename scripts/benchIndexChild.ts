/**
 * One measurement for scripts/bench-index.ts, in a fresh process: reads and parses a workload,
 * builds the context index once (timed alone), simulates the prefix cache for the schedule and
 * the input order, computes Kendall-tau distances, and prints ONE JSON line on stdout.
 *
 *   bun scripts/benchIndexChild.ts --input FILE --method auto|trie|cluster [--warm W]
 *
 * With --warm W it only times W further in-process builds after a first (discarded) one and
 * reports their median (warm JIT, as in a long-running server); nothing else is measured.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { buildContextIndex, type IndexMethod } from "../src/index/buildIndex.ts";
import { parseContextsJsonl } from "../src/index/contextsJsonl.ts";
import { simulateContextSet, simulatePrefixCache } from "../src/index/prefixCacheSimulator.ts";
import { kernels } from "../src/kernels/index.ts";

const BLOCK_TOKENS = 256;
const CAPACITY_FRAC = 0.2;

const { values } = parseArgs({ options: { input: { type: "string" }, method: { type: "string" }, warm: { type: "string" } } });
const input = values.input!;
const method = (values.method ?? "auto") as IndexMethod;

/** Epoch ms, comparable with the parent's clock (same machine). */
const epochNow = () => performance.timeOrigin + performance.now();

const { set } = parseContextsJsonl(readFileSync(input, "utf8"), { source: input });

if (values.warm) {
  buildContextIndex(set, { method }); // warm-up, not counted
  const times: number[] = [];
  for (let r = 0; r < Number(values.warm); r++) {
    const t = performance.now();
    buildContextIndex(set, { method });
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({ warm_ms: times[times.length >> 1], warm_runs: times }));
  process.exit(0);
}

const buildStart = performance.now();
const result = buildContextIndex(set, { method });
const buildMs = performance.now() - buildStart;
const buildEndEpochMs = epochNow();

// Hit ratios, exactly as sim.py --json: unlimited, and capacity = int(0.2 * total tokens).
const totalTokens = set.flat.length * BLOCK_TOKENS;
const capacityTokens = Math.floor(CAPACITY_FRAC * totalTokens);
const scheduledBlocks = result.scheduled.map((c) => c.blocks);
const hit = (capacity: number | null) => simulatePrefixCache(scheduledBlocks, { blockTokens: BLOCK_TOKENS, capacityTokens: capacity }).hitRatio;
const baseline = (capacity: number | null) => simulateContextSet(set, { blockTokens: BLOCK_TOKENS, capacityTokens: capacity }).hitRatio;

// Input order vs output order of every context, in one batched kernel call.
const before = new Int32Array(set.flat.length);
const after = new Int32Array(set.flat.length);
const offsets = new Int32Array(set.size + 1);
let at = 0;
let changed = 0;
result.scheduled.forEach((c, i) => {
  const original = set.flat.subarray(set.offsets[c.input]!, set.offsets[c.input + 1]!);
  before.set(original, at);
  after.set(c.blocks, at);
  at += original.length;
  offsets[i + 1] = at;
  if (original.some((b, k) => b !== c.blocks[k])) changed++;
});
const tau = kernels().kendallTauDistances(before, after, offsets);
let tauSum = 0;
for (const t of tau) tauSum += t;

const line = {
  contexts: set.size,
  blocks: set.flat.length,
  method: result.method,
  build_ms: buildMs,
  build_end_epoch_ms: buildEndEpochMs,
  hit_unlimited: hit(null),
  hit_20: hit(capacityTokens),
  baseline_unlimited: baseline(null),
  baseline_20: baseline(capacityTokens),
  capacity_tokens: capacityTokens,
  kendall_tau_mean: tauSum / set.size,
  reordered_share: changed / set.size,
  kernels: kernels().name,
  // Peak RSS of the whole process (parse + build + simulate), KB on Linux.
  peak_rss_mb: peakRssKb() / 1024,
};
console.log(JSON.stringify(line));

function peakRssKb(): number {
  const maxRss = process.resourceUsage?.().maxRSS; // KB on Linux (checked against VmHWM)
  if (maxRss) return maxRss;
  const match = /VmHWM:\s+(\d+)\s+kB/.exec(readFileSync("/proc/self/status", "utf8"));
  return match ? Number(match[1]) : NaN;
}
