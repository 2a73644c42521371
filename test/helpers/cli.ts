/** Spawns the ctxr CLI from source (bun src/cli/main.ts, or deno run -A under Deno) for end-to-end tests. */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { scriptCommand, which } from "../../src/runtime/childProcess.ts";

export const REPO_ROOT = resolve(import.meta.dirname, "../..");
export const CLI_ENTRY = join(REPO_ROOT, "src/cli/main.ts");

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `bun src/cli/main.ts ...args` on the runtime running the tests (deno run -A under deno test). */
export function runCli(args: string[], options: { cwd?: string; env?: Record<string, string> } = {}): CliRun {
  return runProgram([...scriptCommand(CLI_ENTRY), ...args], options);
}

export function runProgram(command: string[], options: { cwd?: string; env?: Record<string, string> } = {}): CliRun {
  const [program, ...args] = command;
  const result = spawnSync(program!, args, {
    cwd: options.cwd ?? REPO_ROOT,
    env: { ...process.env, NO_COLOR: "1", ...options.env },
    encoding: "utf8",
    maxBuffer: 1 << 30,
  });
  return {
    code: result.status ?? -1,
    stdout: result.stdout ?? "",
    stderr: result.stderr ?? (result.error?.message ?? ""),
  };
}

/** The last non-empty stdout line, parsed as JSON. */
export function lastJsonLine(stdout: string): Record<string, unknown> {
  const lines = stdout.trimEnd().split("\n");
  return JSON.parse(lines[lines.length - 1]!) as Record<string, unknown>;
}

/** A fresh temporary folder; remove it with cleanup(). */
export function tempFolder(prefix = "ctxr-test-"): { path: string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

/** Path of the reference simulator when shared/ is checked out beside the repository. */
export function referenceSimulator(): string | null {
  const sim = resolve(REPO_ROOT, "../shared/workloads/sim.py");
  if (!which("python3")) return null;
  return existsSync(sim) ? sim : null;
}
