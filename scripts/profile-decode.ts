/**
 * Where a decode step's time goes: one model file, N streams decoded together (one FORWARD of N
 * sequences a step, as bench-engine's --parallel), the runner's PROFILE over the decode steps
 * only (linear, attention, the rest), and tokens/s. Prints one JSON line.
 *   npx bun scripts/profile-decode.ts MODEL.gguf [--streams 1] [--context 511] [--steps 32] [--threads 2] [--runner PATH]
 */
import { parseArgs } from "node:util";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";
import { sequenceRange } from "../src/runner/runnerProtocol.ts";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    streams: { type: "string", default: "1" },
    context: { type: "string", default: "511" },
    steps: { type: "string", default: "32" },
    threads: { type: "string", default: "2" },
    runner: { type: "string", default: "cuda/build/ctxr-runner-cpu" },
  },
});
const model = positionals[0];
if (model === undefined) throw new Error("usage: npx bun scripts/profile-decode.ts MODEL.gguf [--streams N] [--context N] [--steps N] [--threads N] [--runner PATH]");
const [streams, context, steps, threads] = [values.streams, values.context, values.steps, values.threads].map(Number) as [number, number, number, number];
const blockSize = 16;
const blocksPerStream = Math.ceil((context + steps + 1) / blockSize);
const runner = await RunnerProcess.start({ executable: values.runner!, model, blocks: (streams + 1) * blocksPerStream, blockSize, threads, kvGroups: 1, log: () => {} });
try {
  const head = await runner.alloc(blocksPerStream);
  const tokens = Array.from({ length: context }, (_, i) => ((i * 7919) % 30000) + 10);
  for (let at = 0; at < context; at += 256) {
    const batch = tokens.slice(at, at + 256);
    await runner.forward({ sequences: [{ table: head, tokens: batch, indices: sequenceRange(at, batch.length), logitRows: [] }] });
  }
  const tables = [head];
  for (let s = 1; s < streams; s++) {
    const table = await runner.alloc(blocksPerStream);
    await runner.copy(head.map((src, i) => ({ src, dst: table[i]! })));
    tables.push(table);
  }
  await runner.profile(true);
  let last = tables.map((_, s) => 100 + s);
  const began = performance.now();
  for (let step = 0; step < steps; step++) {
    const { greedy } = await runner.forward({ sequences: tables.map((table, s) => ({ table, tokens: [last[s]!], indices: [context + step], logitRows: [0] })), greedyRows: true });
    last = greedy!.map((rows) => rows.tokens[0]!);
  }
  const seconds = (performance.now() - began) / 1000;
  const profile = await runner.profile(false);
  console.log(JSON.stringify({ model, streams, tokens_per_second: (streams * steps) / seconds, ms_per_step: (seconds / steps) * 1000, profile }));
} finally {
  await runner.shutdown();
}
