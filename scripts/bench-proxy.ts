/**
 * Benchmark of `ctxr serve --upstream` against a fake OpenAI-compatible engine
 * (scripts/benchProxyUpstream.ts; each server is its own process):
 *
 * 1. Added time to first byte: streaming chat requests with 15 documents of
 *    ~1,000 tokens in the `documents` field through ctxr, vs. the same prompt
 *    pre-rendered sent straight to the engine, at 1 and 16 connections. The two
 *    kinds alternate request by request, so drift hits both alike. TTFB = from
 *    sending the request to receiving the first body chunk.
 * 2. The multi-turn workload (shared/workloads multiturn_C200_T5_k15_o40: 200
 *    conversations x 5 turns, 15 documents a turn, 40% of them sent in an
 *    earlier turn): every turn sends the whole history (earlier user turns with
 *    their documents in full, fixed assistant answers) plus the new turn's
 *    documents, XML-tagged in the message, once straight to an engine and once
 *    through ctxr to another. Reports prompt tokens received vs. forwarded
 *    (ctxr's estimate, 4 characters a token), the engines' own counts (words)
 *    and cached tokens, and whether every answer is unchanged: the fake
 *    engine answers with the set of documents present in full in its prompt.
 *
 * Usage: npx bun scripts/bench-proxy.ts [--requests N] [--workload FILE] [--data-dir] [--skip-ttfb] [--skip-multiturn] [--ctxr-runtime bun|deno] [--baseline ROOT]
 *
 * --baseline ROOT also runs the ctxr of another checkout (its own src/cli/main.ts, e.g. a
 * `git archive | tar -x` of the commit before a change) in front of the same engine, and the TTFB
 * part then sends each request straight, through this ctxr and through the baseline's in a
 * rotating order, reporting both added times and their ratio.
 *
 * --ctxr-runtime deno runs the ctxr server under Deno (deno run, from the deno npm package); the
 * fake engine and the load generator stay on Bun, so only the server's runtime changes.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { renderDocumentsField } from "../src/chat/documentsField.ts";
import { documentText } from "./benchProxyUpstream.ts";
import { DOCS_PER_REQUEST, ttfbAbRun, ttfbRun, type TtfbAbRow, type TtfbRow } from "./benchTtfb.ts";

const ROOT = resolve(import.meta.dirname, "..");
const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const at = args.indexOf(name);
  return at >= 0 && args[at + 1] !== undefined ? args[at + 1]! : fallback;
};
const REQUESTS = Number(option("--requests", "400"));
const WORKLOAD = resolve(option("--workload", resolve(ROOT, "../shared/workloads/data/multiturn_C200_T5_k15_o40.jsonl")));
const JOURNALED = args.includes("--data-dir");
const CTXR_RUNTIME = option("--ctxr-runtime", "bun");
const BASELINE = args.includes("--baseline") ? resolve(option("--baseline", "")) : null;
if (CTXR_RUNTIME !== "bun" && CTXR_RUNTIME !== "deno") throw new Error(`--ctxr-runtime must be bun or deno, got ${CTXR_RUNTIME}`);
/** The command line that runs ctxr's CLI on the chosen runtime. */
const CTXR_COMMAND = CTXR_RUNTIME === "bun" ? [process.execPath, "src/cli/main.ts"] : [join(ROOT, "node_modules/.bin/deno"), "run", "-A", "--unstable-no-legacy-abort", "src/cli/main.ts"];

interface Child {
  url: string;
  stop(): Promise<void>;
}

/** Spawns a server process and waits for the line giving its URL. */
async function spawnChild(command: string[], pattern: RegExp, cwd = ROOT): Promise<Child> {
  const child = Bun.spawn(command, { cwd, stdout: "pipe", stderr: "inherit", env: { ...process.env, NO_COLOR: "1" } });
  const reader = child.stdout.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`${command.join(" ")} exited before it was ready: ${buffered}`);
    buffered += decoder.decode(value, { stream: true });
    const match = pattern.exec(buffered);
    if (match) {
      void (async () => {
        while (!(await reader.read()).done);
      })();
      return {
        url: match[1]!,
        stop: async () => {
          child.kill("SIGTERM");
          await child.exited;
        },
      };
    }
  }
}

const startUpstream = () => spawnChild([process.execPath, "scripts/benchProxyUpstream.ts", "--chunk-delay-ms", "1", "--block-words", "16"], /^url (\S+)$/m);

/** ctxr in front of `upstream`, from this checkout or from the one at `root`. */
async function startCtxr(upstream: string, root = ROOT): Promise<Child & { dataDir: string | null }> {
  const dataDir = JOURNALED ? mkdtempSync(join(tmpdir(), "ctxr-bench-proxy-")) : null;
  const child = await spawnChild(
    [...CTXR_COMMAND, "serve", "--port", "0", ...(dataDir === null ? ["--in-memory"] : ["--data-dir", dataDir]), "--upstream", upstream, "--max-body-bytes", String(64 * 1024 * 1024)],
    /listening on (\S+) \(data/,
    root,
  );
  return {
    ...child,
    dataDir,
    stop: async () => {
      await child.stop();
      if (dataDir !== null) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

const ms = (value: number) => value.toFixed(2);

// ---------------------------------------------------------------------------------------------
// 1. Time to first byte: scripts/benchTtfb.ts
// 2. Multi-turn workload

interface Turn {
  conv: number;
  turn: number;
  blocks: number[];
}

interface Completion {
  answer: string;
  promptTokens: number;
  cachedTokens: number;
}

async function complete(url: string, body: string): Promise<Completion> {
  const response = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const json = (await response.json()) as any;
  if (response.status !== 200) throw new Error(`status ${response.status}: ${JSON.stringify(json)}`);
  return { answer: json.choices[0].message.content, promptTokens: json.usage.prompt_tokens, cachedTokens: json.usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

async function multiTurn(turns: Turn[]) {
  const directEngine = await startUpstream();
  const proxiedEngine = await startUpstream();
  const ctxr = await startCtxr(proxiedEngine.url);
  const histories = new Map<number, { role: string; content: string }[]>();
  const totals = { direct: { prompt: 0, cached: 0 }, proxied: { prompt: 0, cached: 0 } };
  let unchanged = 0;
  let complete_ = 0;
  const mismatches: string[] = [];
  const started = performance.now();
  try {
    for (const { conv, turn, blocks } of turns) {
      const history = histories.get(conv) ?? [];
      const documents = blocks.map((id) => ({ id: String(id), text: documentText(id) }));
      const user = { role: "user", content: `${renderDocumentsField(documents)}\n\nQuestion ${turn} of conversation ${conv}: what do the documents say?` };
      const body = JSON.stringify({ model: "fake-model", max_tokens: 16, messages: [...history, user] });
      const [direct, proxied] = await Promise.all([complete(directEngine.url, body), complete(ctxr.url, body)]);
      totals.direct.prompt += direct.promptTokens;
      totals.direct.cached += direct.cachedTokens;
      totals.proxied.prompt += proxied.promptTokens;
      totals.proxied.cached += proxied.cachedTokens;
      if (direct.answer === proxied.answer) unchanged++;
      else if (mismatches.length < 3) mismatches.push(`conv ${conv} turn ${turn}: direct "${direct.answer}" vs proxied "${proxied.answer}"`);
      // Every document of the turn is in full somewhere in what the engine read.
      const read = new Set(proxied.answer.replace(/^Read documents: |\.$/g, "").split(", "));
      if (blocks.every((b) => read.has(String(b)))) complete_++;
      history.push(user, { role: "assistant", content: `Answer ${turn} of conversation ${conv}.` });
      histories.set(conv, history);
    }
    const stats = (await (await fetch(`${ctxr.url}/v1/stats`)).json()) as any;
    const upstream = stats.upstreams[0];
    return {
      turns: turns.length,
      seconds: (performance.now() - started) / 1000,
      received: upstream.prompt_tokens_received as number,
      forwarded: upstream.prompt_tokens_forwarded as number,
      documents: upstream.documents as number,
      deduplicated: upstream.documents_deduplicated as number,
      engine: totals,
      unchanged,
      complete: complete_,
      mismatches,
    };
  } finally {
    await Promise.all([ctxr.stop(), directEngine.stop(), proxiedEngine.stop()]);
  }
}

// ---------------------------------------------------------------------------------------------

const command = `npx bun scripts/bench-proxy.ts${args.length > 0 ? ` ${args.join(" ")}` : ""}`;
const lines: string[] = [`Command: \`${command}\` (Bun ${Bun.version}, ${navigator.hardwareConcurrency} CPUs; ctxr ${JOURNALED ? "with --data-dir (journaled)" : "--in-memory"}, on ${CTXR_RUNTIME})`, ""];
const summary: Record<string, unknown> = {};

if (!args.includes("--skip-ttfb") && BASELINE !== null) {
  const upstream = await startUpstream();
  const [ctxr, baseline] = await Promise.all([startCtxr(upstream.url), startCtxr(upstream.url, BASELINE)]);
  const rows: TtfbAbRow[] = [];
  try {
    rows.push(await ttfbAbRun(upstream.url, ctxr.url, baseline.url, 1, REQUESTS, 0));
    rows.push(await ttfbAbRun(upstream.url, ctxr.url, baseline.url, 16, REQUESTS, 100_000));
  } finally {
    await Promise.all([ctxr.stop(), baseline.stop(), upstream.stop()]);
  }
  lines.push(
    `Added time to first byte, this checkout against the baseline at ${BASELINE} (each request straight, through this ctxr and through the baseline's, rotating order; added = median of through − direct per request), ms:`,
    "",
    "| connections | requests (each) | direct p50 | this p50 | baseline p50 | added p50, this | added p50, baseline | ratio |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...rows.map((r) => `| ${r.connections} | ${r.requests} | ${ms(r.direct.p50)} | ${ms(r.proxied.p50)} | ${ms(r.baseline.p50)} | **${ms(r.added.p50)}** | ${ms(r.baselineAdded.p50)} | ${(r.added.p50 / r.baselineAdded.p50).toFixed(3)} |`),
    "",
  );
  summary.ttfbAb = rows;
} else if (!args.includes("--skip-ttfb")) {
  const upstream = await startUpstream();
  const ctxr = await startCtxr(upstream.url);
  const rows: TtfbRow[] = [];
  try {
    rows.push(await ttfbRun(upstream.url, ctxr.url, 1, REQUESTS, 0));
    rows.push(await ttfbRun(upstream.url, ctxr.url, 16, REQUESTS, 100_000));
  } finally {
    await Promise.all([ctxr.stop(), upstream.stop()]);
  }
  lines.push(
    `Time to first byte, streaming chat request with ${DOCS_PER_REQUEST} documents of ~1,000 tokens (\`documents\` field through ctxr vs. pre-rendered straight to the engine), ms:`,
    "",
    "| connections | requests (each kind) | direct p50 | direct p99 | through ctxr p50 | through ctxr p99 | added p50 | added p99 |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...rows.map((r) => `| ${r.connections} | ${r.requests} | ${ms(r.direct.p50)} | ${ms(r.direct.p99)} | ${ms(r.proxied.p50)} | ${ms(r.proxied.p99)} | **${ms(r.added.p50)}** | ${ms(r.added.p99)} |`),
    "",
  );
  summary.ttfb = rows;
}

if (!args.includes("--skip-multiturn")) {
  if (!existsSync(WORKLOAD)) throw new Error(`no workload at ${WORKLOAD} (give --workload FILE)`);
  const turns = readFileSync(WORKLOAD, "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Turn);
  const r = await multiTurn(turns);
  const drop = 1 - r.forwarded / r.received;
  const engineDrop = 1 - r.engine.proxied.prompt / r.engine.direct.prompt;
  const uncached = (t: { prompt: number; cached: number }) => t.prompt - t.cached;
  lines.push(
    `Multi-turn workload ${WORKLOAD.split("/").pop()} (${r.turns} requests, whole history each turn, ${r.seconds.toFixed(1)} s):`,
    "",
    "| | straight to the engine | through ctxr | change |",
    "|---|---:|---:|---:|",
    `| prompt tokens (ctxr's estimate: received vs. forwarded) | ${r.received} | ${r.forwarded} | **${(-drop * 100).toFixed(1)}%** |`,
    `| prompt tokens (engine's count, words) | ${r.engine.direct.prompt} | ${r.engine.proxied.prompt} | ${(-engineDrop * 100).toFixed(1)}% |`,
    `| cached prompt tokens (engine, 16-word blocks) | ${r.engine.direct.cached} | ${r.engine.proxied.cached} | |`,
    `| prompt tokens to prefill (not cached) | ${uncached(r.engine.direct)} | ${uncached(r.engine.proxied)} | ${((uncached(r.engine.proxied) / uncached(r.engine.direct) - 1) * 100).toFixed(1)}% |`,
    `| answers unchanged (same documents read in full) | | ${r.unchanged} / ${r.turns} | |`,
    `| turns whose every document is in the prompt in full | | ${r.complete} / ${r.turns} | |`,
    `| documents in new turns / replaced by a note | | ${r.documents} / ${r.deduplicated} | |`,
    "",
  );
  if (r.mismatches.length > 0) lines.push(`Mismatched answers (first ${r.mismatches.length}):`, ...r.mismatches.map((m) => `- ${m}`), "");
  summary.multiturn = { ...r, forwarded_drop: drop, engine_prompt_drop: engineDrop };
}

process.stdout.write(`${lines.join("\n")}\n${JSON.stringify(summary)}\n`);
