/**
 * Greedy prefix trie benchmark: the WASM twin against the TypeScript one.
 *
 *   npx bun scripts/bench-trie.ts --input FILE.jsonl [--runs 5] [--warm 5] [--lookahead 4]
 *
 * For each implementation, --runs FRESH processes each parse the workload, then time the first
 * greedyPrefixTrie call (cold: WASM module instantiation or cold JIT included) and --warm more
 * calls in the same process (their median is the warm time). Prints one JSON line per
 * implementation: medians over the runs of the fresh and the warm times, and every run's figure.
 * The machines are shared and noisy: compare the two lines of one invocation.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { parseContextsJsonl } from "../src/index/contextsJsonl.ts";
import { greedyPrefixTrieTs, greedyPrefixTrieWasm } from "../src/index/greedyPrefixTrie.ts";

const { values } = parseArgs({
  options: {
    input: { type: "string" },
    runs: { type: "string", default: "5" },
    warm: { type: "string", default: "5" },
    lookahead: { type: "string", default: "4" },
    child: { type: "string" },
  },
});
if (!values.input) {
  console.error("usage: bun scripts/bench-trie.ts --input FILE.jsonl [--runs 5] [--warm 5] [--lookahead 4]");
  process.exit(2);
}
const lookahead = Number(values.lookahead);
const warm = Number(values.warm);

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const round = (x: number) => Math.round(x * 10) / 10;

if (values.child) {
  // One fresh process: parse, then time the first call and the warm ones.
  const build = values.child === "ts" ? greedyPrefixTrieTs : greedyPrefixTrieWasm;
  const { set } = parseContextsJsonl(readFileSync(values.input, "utf8"), { source: values.input });
  const time = () => {
    const t = performance.now();
    build(set, { lookahead });
    return performance.now() - t;
  };
  const fresh = time();
  const warmTimes = Array.from({ length: warm }, time);
  console.log(JSON.stringify({ contexts: set.size, fresh_ms: fresh, warm_ms: warmTimes.length ? median(warmTimes) : null }));
} else {
  for (const impl of ["wasm", "ts"]) {
    const rows: Array<{ contexts: number; fresh_ms: number; warm_ms: number | null }> = [];
    for (let r = 0; r < Number(values.runs); r++) {
      const args = [import.meta.path, "--child", impl, "--input", values.input, "--warm", String(warm), "--lookahead", String(lookahead)];
      const child = spawnSync(process.execPath, args, { encoding: "utf8" });
      if (child.status !== 0) throw new Error(`child failed: ${child.stderr}`);
      rows.push(JSON.parse(child.stdout.trim().split("\n").pop()!));
    }
    const warmed = rows.map((r) => r.warm_ms).filter((w): w is number => w !== null);
    console.log(JSON.stringify({
      impl,
      input: values.input,
      contexts: rows[0]!.contexts,
      lookahead,
      fresh_ms_median: round(median(rows.map((r) => r.fresh_ms))),
      warm_ms_median: warmed.length ? round(median(warmed)) : null,
      fresh_ms: rows.map((r) => round(r.fresh_ms)),
    }));
  }
}
