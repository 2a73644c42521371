/**
 * The servers of scripts/bench-routing.ts: fake engines in one child process
 * (benchRoutingEngines.ts) and `ctxr serve --upstream … --kv-events …` spawned as a user runs it.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnServer, type SpawnedServer } from "../test/server/serverKit.ts";
import { REPO } from "./benchKit.ts";
import type { EngineFigures } from "./benchRoutingEngines.ts";

async function until(condition: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(20);
  }
}

export interface EngineFleetOptions {
  engines: number;
  blockSize: number;
  capacityBlocks: number;
  /** null: the fake engine's own simple tokenizer (about 4 characters a token, cheap). */
  tokenizerDir: string | null;
  prefillMsPerToken: number;
  /** The fake engine's load model (--engine-load: prefills queued, decode steps shared). */
  engineLoad?: boolean;
  kvEvents: boolean;
}

export interface EngineFleet {
  urls: string[];
  kvEvents: string[];
  stats(): Promise<EngineFigures[]>;
  stop(): Promise<void>;
}

export async function startEngines(options: EngineFleetOptions): Promise<EngineFleet> {
  const child = Bun.spawn(
    [
      process.execPath,
      "scripts/benchRoutingEngines.ts",
      "--engines", String(options.engines),
      "--block-size", String(options.blockSize),
      "--capacity-blocks", String(options.capacityBlocks),
      ...(options.tokenizerDir === null ? [] : ["--tokenizer", options.tokenizerDir]),
      "--prefill-ms-per-token", String(options.prefillMsPerToken),
      ...(options.engineLoad === true ? ["--engine-load"] : []),
      ...(options.kvEvents ? [] : ["--no-kv-events"]),
    ],
    { cwd: REPO, stdout: "pipe", stderr: "inherit" },
  );
  const reader = child.stdout.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  let match: RegExpExecArray | null = null;
  while ((match = /^engines (.+)$/m.exec(buffered)) === null) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the fake engines exited before they listened: ${buffered}`);
    buffered += decoder.decode(value, { stream: true });
  }
  void (async () => {
    while (!(await reader.read()).done);
  })();
  const ready = JSON.parse(match[1]!) as { urls: string[]; kvEvents: string[]; control: string };
  return {
    urls: ready.urls,
    kvEvents: ready.kvEvents,
    stats: async () => (await (await fetch(`${ready.control}/stats`)).json()) as EngineFigures[],
    stop: async () => {
      child.kill("SIGTERM");
      await child.exited;
    },
  };
}

export interface ProxyOptions {
  /** --routing; null: no --kv-events and no --tokenizer (the proxy as before issue 13). */
  routing: "auto" | "estimate" | "round-robin" | null;
  /** --tokenizer DIR with the events (null: events followed, prompts not tokenized). */
  tokenizerDir: string | null;
  blockSize: number;
  /** --capacity-tokens (null: none). */
  capacityTokens: number | null;
  /** Journaled in a temporary --data-dir (the default mode), else --in-memory. */
  journaled: boolean;
  /** --kv-overlap-weight (null: the default). */
  overlapWeight?: number | null;
}

export interface Proxy {
  server: SpawnedServer;
  url: string;
  stats(): Promise<any>;
  stop(): Promise<void>;
}

export async function startProxy(engines: EngineFleet, options: ProxyOptions): Promise<Proxy> {
  const dataDir = options.journaled ? mkdtempSync(join(tmpdir(), "ctxr-bench-routing-")) : null;
  const events = options.routing !== null;
  const server = await spawnServer(
    [
      ...(dataDir === null ? ["--in-memory"] : ["--data-dir", dataDir]),
      ...engines.urls.flatMap((url, i) => ["--upstream", url, ...(events ? ["--kv-events", engines.kvEvents[i]!] : [])]),
      ...(events ? [...(options.tokenizerDir === null ? [] : ["--tokenizer", options.tokenizerDir]), "--block-size", String(options.blockSize), "--routing", options.routing!] : []),
      ...(options.capacityTokens === null ? [] : ["--capacity-tokens", String(options.capacityTokens)]),
      ...(options.overlapWeight === undefined || options.overlapWeight === null ? [] : ["--kv-overlap-weight", String(options.overlapWeight)]),
      "--max-body-bytes", String(64 * 1024 * 1024),
    ],
    {},
    60_000,
  );
  const stats = async () => (await (await fetch(`${server.url}/v1/stats`)).json()) as any;
  // Routing by events starts once every mirror is live (connected and caught up with the replay).
  if (events) await until(async () => (await stats()).upstreams.every((u: any) => u.kv_events?.connected === true), "every engine's KV events followed", 30_000);
  return {
    server,
    url: server.url,
    stats,
    stop: async () => {
      server.kill("SIGTERM");
      await server.exited;
      if (dataDir !== null) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
