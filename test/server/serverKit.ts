/**
 * Test kit for the HTTP server: an in-process server on Bun.serve (port 0, real
 * fetch), and `ctxr serve` spawned as a child process for CLI and crash tests.
 */
import { ContextService, type ServiceOptions } from "../../src/online/contextService.ts";
import { startServer, type RunningServer, type ServerOptions } from "../../src/server/serve.ts";
import { CLI_ENTRY, REPO_ROOT } from "../helpers/cli.ts";
import { GenerationEngine, type EngineOptions } from "../../src/engine/generationEngine.ts";
import { afterAll, beforeAll } from "bun:test";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { scriptCommand, spawnPiped, type PipedChild } from "../../src/runtime/childProcess.ts";

export interface Answer<T = any> {
  status: number;
  body: T;
  headers: Headers;
  text: string;
}

export interface Client {
  readonly url: string;
  request(method: string, path: string, init?: { body?: string | Uint8Array | ReadableStream<Uint8Array> | null; headers?: Record<string, string> }): Promise<Answer>;
  get(path: string, headers?: Record<string, string>): Promise<Answer>;
  /** POST a JSON value (serialized here) or a raw string body with content-type application/json. */
  post(path: string, body?: unknown, headers?: Record<string, string>): Promise<Answer>;
}

export function client(url: string, defaultHeaders: Record<string, string> = {}): Client {
  const request: Client["request"] = async (method, path, init = {}) => {
    const response = await fetch(url + path, { method, body: init.body ?? null, headers: { ...defaultHeaders, ...init.headers } });
    const text = await response.text();
    let body: unknown = undefined;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    return { status: response.status, body, headers: response.headers, text };
  };
  return {
    url,
    request,
    get: (path, headers) => request("GET", path, { headers }),
    post: (path, body, headers) =>
      request("POST", path, {
        body: body === undefined ? null : typeof body === "string" ? body : JSON.stringify(body),
        headers: { "content-type": "application/json", ...headers },
      }),
  };
}

export interface TestServer extends Client {
  readonly service: ContextService;
  readonly server: RunningServer;
  close(): Promise<void>;
}

/** An in-process server over a fresh service (in memory unless dataDir is given). */
export async function startTestServer(
  options: { service?: Partial<ServiceOptions>; server?: ServerOptions; headers?: Record<string, string> } = {},
): Promise<TestServer> {
  const service = await ContextService.open({ dataDir: null, ...options.service });
  const server = startServer(service, { host: "127.0.0.1", port: 0, log: () => {}, ...options.server });
  const c = client(server.url, options.headers);
  return {
    ...c,
    service,
    server,
    async close() {
      await server.stop(1000);
      await service.close();
    },
  };
}

export interface EngineTestServer extends TestServer {
  readonly engine: GenerationEngine;
}

/** An in-process `serve --model`: the engine over the model folder (the CPU runner, 256 KV blocks, 2 threads unless given), a service and a server. */
export async function startEngineServer(model: string, engineOptions: Partial<EngineOptions> = {}): Promise<EngineTestServer> {
  const engine = await GenerationEngine.open({ model, runner: buildRunner(), kvBlocks: 256, threads: 2, ...engineOptions });
  const test = await startTestServer({ server: { engine } });
  return {
    ...test,
    engine,
    async close() {
      await test.close();
      await engine.close();
    },
  };
}

/**
 * A tiny-model `serve --model` for the tests of one file: opened before them (`options` for the
 * model folder and the engine), closed after; its fields are set by the time the tests run.
 */
export function engineServerForTests(name: string, engineOptions: Partial<EngineOptions> = {}): { api: EngineTestServer; engine: GenerationEngine } {
  const holder = {} as { api: EngineTestServer; engine: GenerationEngine };
  let model: { path: string; cleanup(): void } | undefined;
  beforeAll(async () => {
    model = tinyModelFolder({}, name);
    holder.api = await startEngineServer(model.path, engineOptions);
    holder.engine = holder.api.engine;
  }, 300_000);
  afterAll(async () => {
    await holder.api?.close();
    model?.cleanup();
  });
  return holder;
}

export interface SpawnedServer extends Client {
  readonly process: PipedChild;
  /** stdout lines printed before the listening line (and that line). */
  readonly startLines: string[];
  /** Every stdout line so far, the start lines included. */
  readonly outputLines: string[];
  /** Everything on stderr so far (complete once exited). */
  stderr(): string;
  /** Resolves with the exit code. */
  exited: Promise<number>;
  kill(signal: NodeJS.Signals | number): void;
}

/** Stops spawned servers in the order given (SIGTERM, then waits for each to exit); absent ones are skipped. */
export async function stopSpawned(...servers: (SpawnedServer | undefined)[]): Promise<void> {
  for (const server of servers) {
    server?.kill("SIGTERM");
    await server?.exited;
  }
}

/** Spawns `bun src/cli/main.ts serve --port 0 ...args` and waits for its listening line. */
export async function spawnServer(args: string[], env: Record<string, string> = {}, timeoutMs = 20_000, cwd = REPO_ROOT): Promise<SpawnedServer> {
  const child = spawnPiped([...scriptCommand(CLI_ENTRY), "serve", "--port", "0", ...args], { cwd, env: { ...process.env, NO_COLOR: "1", ...env } });
  let stderr = "";
  const stderrDone = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of child.stderr) stderr += decoder.decode(chunk, { stream: true });
  })();
  const lines: string[] = [];
  const reader = child.stdout.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  const deadline = Date.now() + timeoutMs;
  let url: string | null = null;
  while (url === null) {
    const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), Math.max(0, deadline - Date.now())));
    const read = await Promise.race([reader.read(), timeout]);
    if (read === "timeout" || read.done) {
      child.kill(9);
      await child.exited;
      await stderrDone;
      throw new Error(`ctxr serve did not start: stdout ${JSON.stringify(buffered + lines.join("\n"))}, stderr ${JSON.stringify(stderr)}`);
    }
    buffered += decoder.decode(read.value, { stream: true });
    let newline: number;
    while ((newline = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      lines.push(line);
      const match = /^ctxr serve: listening on (http:\/\/\S+) \(data: .+\)$/.exec(line);
      if (match) url = match[1]!;
    }
  }
  // Keep draining stdout (kept as lines) so the child never blocks on a full pipe.
  const outputLines = [...lines];
  void (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        outputLines.push(buffered.slice(0, newline));
        buffered = buffered.slice(newline + 1);
      }
    }
  })();
  const exited = child.exited.then(async (code) => {
    await stderrDone;
    return code;
  });
  return {
    ...client(url),
    process: child,
    startLines: lines,
    outputLines,
    stderr: () => stderr,
    exited,
    kill: (signal) => child.kill(signal),
  };
}
