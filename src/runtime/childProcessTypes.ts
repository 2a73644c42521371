/** The childProcess adapter's contract: what both runtimes' implementations provide. */

/** A running child whose stdin, stdout and stderr are pipes. */
export interface PipedChild {
  readonly pid: number;
  readonly stdin: {
    /** Queues bytes (in order); a failure shows in flush(). */
    write(bytes: Uint8Array): unknown;
    /** Resolves once everything written has gone to the pipe. */
    flush(): unknown;
    /** Closes the pipe after what was written (the child reads end of file). */
    end(): unknown;
  };
  readonly stdout: ReadableStream<Uint8Array>;
  readonly stderr: ReadableStream<Uint8Array>;
  /** Resolves with the exit code once the child has exited. */
  readonly exited: Promise<number>;
  /** null while running, or when a signal ended it. */
  readonly exitCode: number | null;
  /** The signal that ended it (e.g. "SIGKILL"), else null or undefined. */
  readonly signalCode: string | number | null | undefined;
  kill(signal?: NodeJS.Signals | number): void;
}

export interface CommandResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

export interface SpawnOptions {
  /** Exactly the child's environment. */
  env: Record<string, string | undefined>;
  cwd?: string;
}

export interface ChildProcesses {
  /** Starts `argv`. Throws when it cannot be started. */
  spawnPiped(argv: readonly string[], options: SpawnOptions): PipedChild;
  /** Runs `argv` to its end, capturing its output. */
  runSync(argv: readonly string[]): CommandResult;
  /** The path of `command` on PATH, or null. */
  which(command: string): string | null;
  /** The command line that runs the TypeScript file `entry` on this runtime (with every permission on Deno). */
  scriptCommand(entry: string): string[];
}
