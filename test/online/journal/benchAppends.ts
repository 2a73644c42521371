/**
 * Journal append throughput: N concurrent appenders of ~500-byte records for a fixed time,
 * with fsync on (default) or off. Prints one JSON line per run.
 *
 *   bun test/online/journal/benchAppends.ts [--concurrency 16] [--seconds 3] [--bytes 500] [--no-fsync] [--dir DIR]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Journal } from "../../../src/online/journal/journal.ts";

const { values } = parseArgs({
  options: {
    concurrency: { type: "string", default: "16" },
    seconds: { type: "string", default: "3" },
    bytes: { type: "string", default: "500" },
    "no-fsync": { type: "boolean", default: false },
    dir: { type: "string" },
  },
});
const concurrency = Number(values.concurrency);
const seconds = Number(values.seconds);
const fsync = !values["no-fsync"];
const base = values.dir ?? tmpdir();
const dir = mkdtempSync(join(base, "ctxr-journal-bench-"));
const padding = "x".repeat(Math.max(0, Number(values.bytes) - 60));

try {
  const { journal } = await Journal.open<null, { op: string; id: number; blocks: number[]; pad: string }>({ dir, fsync });
  const latencies: number[] = [];
  const deadline = performance.now() + seconds * 1000;
  let next = 0;
  const appender = async () => {
    while (performance.now() < deadline) {
      const id = next++;
      const start = performance.now();
      await journal.append({ op: "insert", id, blocks: [id, id + 1, id + 2], pad: padding });
      latencies.push(performance.now() - start);
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, appender));
  const elapsed = (performance.now() - start) / 1000;
  await journal.close();
  latencies.sort((a, b) => a - b);
  const quantile = (q: number) => Number(latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]!.toFixed(3));
  console.log(
    JSON.stringify({
      concurrency,
      fsync,
      record_bytes: Math.round(journal.stats.bytes / journal.stats.records),
      appends: latencies.length,
      appends_per_s: Math.round(latencies.length / elapsed),
      batches: journal.stats.batches,
      records_per_batch: Number((journal.stats.records / journal.stats.batches).toFixed(1)),
      latency_ms: { p50: quantile(0.5), p99: quantile(0.99), max: quantile(1) },
    }),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
