/**
 * Resident memory of the runner as a mixture-of-experts file's experts are used (issue 32, item 3):
 * VmRSS after loading, then after FORWARDs of 1, 16 and 512 more tokens. The expert tensors are
 * read where the file maps them, so the resident set grows with the experts the tokens are routed to.
 *
 *   npx bun scripts/bench-moe-resident.ts RUNNER MODEL.gguf
 */
import { readFileSync } from "node:fs";
import { RunnerProcess } from "../src/runner/runnerProcess.ts";
import { sequenceRange } from "../src/runner/runnerProtocol.ts";

const [runner, model] = process.argv.slice(2);
if (!runner || !model) throw new Error("usage: bench-moe-resident.ts RUNNER MODEL.gguf");
const rss = (pid: number) => { const s = readFileSync(`/proc/${pid}/status`, "utf8"); return Number(/VmRSS:\s+(\d+)/.exec(s)![1]) / 1024; };
const p = await RunnerProcess.start({ executable: runner, model, blocks: 64, blockSize: 16, threads: 2 });
const pid = p.pid!;
const out = [`loaded ${rss(pid).toFixed(0)} MiB`];
const table = await p.alloc(40);
await p.forward({ sequences: [{ table, tokens: [11], indices: sequenceRange(0, 1), logitRows: [0] }] });
out.push(`after 1 token ${rss(pid).toFixed(0)} MiB`);
const ids = Array.from({ length: 16 }, (_, i) => (i * 7919) % 1000);
await p.forward({ sequences: [{ table, tokens: ids, indices: sequenceRange(1, 16), logitRows: [15] }] });
out.push(`after 17 tokens ${rss(pid).toFixed(0)} MiB`);
const more = Array.from({ length: 512 }, (_, i) => (i * 104729) % 1000);
await p.forward({ sequences: [{ table, tokens: more, indices: sequenceRange(17, 512), logitRows: [511] }] });
out.push(`after 529 tokens ${rss(pid).toFixed(0)} MiB`);
console.log(out.join(", "));
await p.shutdown();
