/**
 * The server's own time to first byte on `ctxr serve --model`: streaming requests with short
 * prompts the prefix cache already holds and max_tokens 1, so that the time is the HTTP layer's,
 * the prompt's preparation and one small forward, not the model's prefill. Three kinds: a chat, a
 * chat with `documents` (segmented prompt), a text completion.
 *
 * With --baseline ROOT a second server runs from another checkout (its own src/cli/main.ts, e.g.
 * `git worktree add` or `git archive | tar -x` of the commit before a change) and requests
 * alternate between the two one at a time (which goes first alternates too), so that drift on a
 * shared machine hits both alike. Medians; ratio = this checkout / baseline.
 *
 *   npx bun scripts/bench-serve-ttfb.ts [--baseline ROOT] [--requests 300] [--model models/quality] [--threads 1]
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import type { SpawnedServer } from "../test/server/serverKit.ts";
import { REPO, median, percentile, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    baseline: { type: "string" },
    requests: { type: "string", default: "300" },
    model: { type: "string", default: "models/quality" },
    threads: { type: "string", default: "1" },
  },
});
const REQUESTS = Number(values.requests);
const WARM_UP = 20;
const modelDir = resolve(REPO, values.model!);

type Kind = "chat" | "chat+documents" | "completion";
const KINDS: readonly Kind[] = ["chat", "chat+documents", "completion"];

function request(kind: Kind, i: number): { path: string; body: string } {
  // The question varies a little so that its last block is computed each time; the rest is cached.
  const question = `Question ${i % 10}: what is the first word?`;
  const common = { stream: true, max_tokens: 1, temperature: 0 };
  if (kind === "completion") return { path: "/v1/completions", body: JSON.stringify({ ...common, prompt: `Some text to complete. ${question}` }) };
  const documents = kind === "chat+documents" ? { documents: [{ id: "a", text: "Alpha is the first letter." }, { id: "b", text: "Beta is the second letter." }] } : {};
  return { path: "/v1/chat/completions", body: JSON.stringify({ ...common, messages: [{ role: "user", content: question }], ...documents }) };
}

async function timeToFirstByte(url: string, path: string, body: string): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const reader = response.body!.getReader();
  const first = await reader.read();
  const elapsed = performance.now() - started;
  if (response.status !== 200 || first.done) throw new Error(`${path}: status ${response.status}`);
  while (!(await reader.read()).done);
  return elapsed;
}

/** `ctxr serve --model` from the checkout at `root` (its own serverKit spawns its own CLI). */
async function startServer(root: string): Promise<SpawnedServer> {
  const kit = (await import(resolve(root, "test/server/serverKit.ts"))) as typeof import("../test/server/serverKit.ts");
  return kit.spawnServer(["--model", modelDir, "--in-memory", "--threads", values.threads!], {}, 120_000);
}

const servers: { name: string; server: SpawnedServer }[] = [{ name: "this", server: await startServer(REPO) }];
if (values.baseline !== undefined) servers.push({ name: "baseline", server: await startServer(resolve(values.baseline)) });
const times = new Map<string, number[]>();
try {
  for (const kind of KINDS) {
    for (let i = 0; i < WARM_UP; i++) for (const { server } of servers) await timeToFirstByte(server.url, request(kind, i).path, request(kind, i).body);
    for (let i = 0; i < REQUESTS; i++) {
      const { path, body } = request(kind, i);
      const order = i % 2 === 0 ? servers : [...servers].reverse();
      for (const { name, server } of order) {
        const key = `${kind}/${name}`;
        times.set(key, [...(times.get(key) ?? []), await timeToFirstByte(server.url, path, body)]);
      }
    }
    progress(`${kind}: ${REQUESTS} requests each`);
  }
} finally {
  for (const { server } of servers) {
    server.kill("SIGTERM");
    await server.exited;
  }
}

const ms = (x: number) => x.toFixed(2);
const rows = KINDS.map((kind) => {
  const ours = times.get(`${kind}/this`)!;
  const base = times.get(`${kind}/baseline`);
  return { kind, p50: median(ours), p99: percentile(ours, 0.99), baselineP50: base === undefined ? null : median(base), baselineP99: base === undefined ? null : percentile(base, 0.99) };
});
const lines = [
  `Command: \`npx bun scripts/bench-serve-ttfb.ts ${process.argv.slice(2).join(" ")}\` (Bun ${Bun.version}, ${navigator.hardwareConcurrency} CPUs; model ${values.model}, ${REQUESTS} requests of each kind per server)`,
  "",
  "| request | TTFB p50 ms | p99 | baseline p50 | baseline p99 | p50 ratio |",
  "|---|---:|---:|---:|---:|---:|",
  ...rows.map((r) => `| ${r.kind} | ${ms(r.p50)} | ${ms(r.p99)} | ${r.baselineP50 === null ? "—" : ms(r.baselineP50)} | ${r.baselineP99 === null ? "—" : ms(r.baselineP99)} | ${r.baselineP50 === null ? "—" : (r.p50 / r.baselineP50).toFixed(3)} |`),
];
process.stdout.write(`${lines.join("\n")}\n${JSON.stringify(rows)}\n`);
