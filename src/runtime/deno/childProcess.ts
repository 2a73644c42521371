import { constants as osConstants } from "node:os";
import { delimiter, join } from "node:path";
import type { ChildProcesses, PipedChild } from "../childProcessTypes.ts";
import { isExecutableFile } from "../executableFile.ts";
import { deno, type DenoChildProcess } from "./denoApi.ts";

const decoder = new TextDecoder();

/** Deno.ChildProcess in the shape of Bun's Subprocess (the parts PipedChild names). */
class DenoPipedChild implements PipedChild {
  exitCode: number | null = null;
  signalCode: string | null = null;
  readonly exited: Promise<number>;
  readonly stdin: PipedChild["stdin"];
  private lastWrite: Promise<void> = Promise.resolve();

  constructor(private readonly child: DenoChildProcess) {
    this.exited = child.status.then((status) => {
      this.signalCode = status.signal;
      this.exitCode = status.signal === null ? status.code : null;
      return status.code;
    });
    const writer = child.stdin.getWriter();
    this.stdin = {
      write: (bytes) => {
        this.lastWrite = writer.write(bytes);
        // Reported by flush(); unobserved here so that it is not an unhandled rejection.
        this.lastWrite.catch(() => {});
      },
      flush: () => this.lastWrite,
      end: () => {
        this.lastWrite = this.lastWrite.then(() => writer.close());
        this.lastWrite.catch(() => {});
      },
    };
  }

  get pid(): number {
    return this.child.pid;
  }

  get stdout(): ReadableStream<Uint8Array> {
    return this.child.stdout;
  }

  get stderr(): ReadableStream<Uint8Array> {
    return this.child.stderr;
  }

  kill(signal: NodeJS.Signals | number = "SIGTERM"): void {
    try {
      this.child.kill(typeof signal === "number" ? osSignalName(signal) : signal);
    } catch {
      // Already exited: nothing to end.
    }
  }
}

export const denoChildProcesses: ChildProcesses = {
  spawnPiped(argv, options) {
    const [command, ...args] = argv;
    const env = Object.fromEntries(Object.entries(options.env).filter((entry): entry is [string, string] => entry[1] !== undefined));
    const child = new (deno().Command)(command!, { args, env, clearEnv: true, cwd: options.cwd, stdin: "piped", stdout: "piped", stderr: "piped" }).spawn();
    return new DenoPipedChild(child);
  },
  runSync(argv) {
    const [command, ...args] = argv;
    try {
      const output = new (deno().Command)(command!, { args, stdin: "null", stdout: "piped", stderr: "piped" }).outputSync();
      return { exitCode: output.signal === null ? output.code : null, stdout: decoder.decode(output.stdout), stderr: decoder.decode(output.stderr) };
    } catch (error) {
      return { exitCode: null, stdout: "", stderr: (error as Error).message };
    }
  },
  which(command) {
    if (command.includes("/")) return isExecutableFile(command) ? command : null;
    for (const folder of (process.env.PATH ?? "").split(delimiter)) {
      if (folder !== "" && isExecutableFile(join(folder, command))) return join(folder, command);
    }
    return null;
  },
  scriptCommand: (entry) => [process.execPath, "run", "-A", entry],
};

/** Deno.ChildProcess.kill takes signal names only. */
function osSignalName(signal: number): string {
  const entry = Object.entries(osConstants.signals).find(([, number]) => number === signal);
  return entry?.[0] ?? "SIGTERM";
}
