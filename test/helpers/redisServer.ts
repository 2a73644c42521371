/**
 * A real redis-server (Debian's package, which .ci/run installs) on a free port, in a
 * temporary folder, for the shared-state tests. Without redis-server the tests fail with a
 * message saying so: they never pass without having run.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freeTcpPort } from "./freeTcpPort.ts";
import { sleep } from "../../src/runtime/sleep.ts";

export interface RedisServer {
  readonly port: number;
  /** The redis-server process's id (undefined while killed). */
  readonly pid: number | undefined;
  /** redis://127.0.0.1:PORT (database 0; append `/N` for another). */
  readonly url: string;
  /** Stops the server (SIGKILL: nothing is saved on the way out); `start` brings it back on the same port. */
  kill(): Promise<void>;
  start(): Promise<void>;
  /** Runs redis-cli against the server; returns its stdout. */
  cli(...args: string[]): string;
  stop(): Promise<void>;
}

export function redisServerPath(): string {
  const found = spawnSync("sh", ["-c", "command -v redis-server"], { encoding: "utf8" }).stdout.trim();
  if (!found) throw new Error("redis-server is not installed: the shared-state tests need a real one (apt-get install redis-server; .ci/run installs it)");
  return found;
}

export interface RedisServerOptions {
  /** AOF persistence (default off: a killed server comes back empty). */
  appendOnly?: boolean;
  /** With appendOnly: when the AOF is fsync'd (default always). */
  appendFsync?: "always" | "everysec";
  /** More redis-server arguments (e.g. ["--proto-max-bulk-len", "1mb"], ["--requirepass", "..."]). */
  extraArgs?: string[];
  /** With --requirepass in extraArgs: the password redis-cli gives. */
  password?: string;
}

export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  const executable = redisServerPath();
  const dir = mkdtempSync(join(tmpdir(), "ctxr-redis-"));
  const port = await freeTcpPort();
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", options.appendOnly ? "yes" : "no", "--appendfsync", options.appendFsync ?? "always", ...(options.extraArgs ?? [])];
  const auth = options.password === undefined ? [] : ["-a", options.password, "--no-auth-warning"];
  let child: ChildProcess | null = null;

  const cli = (...command: string[]): string => {
    const result = spawnSync("redis-cli", ["-p", String(port), ...auth, ...command], { encoding: "utf8" });
    if (result.status !== 0) throw new Error(`redis-cli ${command.join(" ")}: ${result.stderr}`);
    return result.stdout;
  };
  const start = async (): Promise<void> => {
    child = spawn(executable, args, { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout!.on("data", (chunk) => (output += chunk));
    child.stderr!.on("data", (chunk) => (output += chunk));
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`redis-server exited at start (code ${child.exitCode}):\n${output}`);
      const ping = spawnSync("redis-cli", ["-p", String(port), ...auth, "PING"], { encoding: "utf8" });
      if (ping.stdout.trim() === "PONG") return;
      if (Date.now() > deadline) throw new Error(`redis-server did not answer PING on port ${port} within 10 s:\n${output}`);
      await sleep(20);
    }
  };
  const kill = async (): Promise<void> => {
    const running = child;
    child = null;
    if (running === null || running.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => running.once("exit", () => resolve()));
    running.kill("SIGKILL");
    await exited;
  };
  await start();
  return {
    port,
    get pid() {
      return child?.pid;
    },
    url: `redis://127.0.0.1:${port}`,
    kill,
    start,
    cli,
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
