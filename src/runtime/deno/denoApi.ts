/**
 * The parts of Deno's global API that the Deno adapters use, typed here so that the project
 * type-checks with Bun's types alone (tsc has no Deno lib). Only src/runtime/deno/ imports this.
 */
export interface DenoChildStatus {
  success: boolean;
  code: number;
  signal: string | null;
}

export interface DenoChildProcess {
  readonly pid: number;
  readonly stdin: WritableStream<Uint8Array>;
  readonly stdout: ReadableStream<Uint8Array>;
  readonly stderr: ReadableStream<Uint8Array>;
  readonly status: Promise<DenoChildStatus>;
  kill(signal?: string): void;
}

export interface DenoCommandOptions {
  args?: string[];
  env?: Record<string, string>;
  clearEnv?: boolean;
  cwd?: string;
  stdin?: "piped" | "inherit" | "null";
  stdout?: "piped" | "inherit" | "null";
  stderr?: "piped" | "inherit" | "null";
}

export interface DenoCommand {
  spawn(): DenoChildProcess;
  outputSync(): { code: number; signal: string | null; stdout: Uint8Array; stderr: Uint8Array };
}

export interface DenoHttpServer {
  readonly addr: { hostname: string; port: number };
  readonly finished: Promise<void>;
  shutdown(): Promise<void>;
  unref(): void;
}

export interface DenoServeOptions {
  hostname: string;
  port: number;
  reusePort?: boolean;
  onListen?: (addr: { hostname: string; port: number }) => void;
  onError?: (error: unknown) => Response | Promise<Response>;
  handler: (request: Request) => Response | Promise<Response>;
}

export interface DenoConn {
  read(into: Uint8Array): Promise<number | null>;
  write(bytes: Uint8Array): Promise<number>;
  close(): void;
}

export interface DenoApi {
  Command: new (command: string, options?: DenoCommandOptions) => DenoCommand;
  serve(options: DenoServeOptions): DenoHttpServer;
  readFile(path: string): Promise<Uint8Array>;
  connect(options: { hostname: string; port: number }): Promise<DenoConn>;
  connectTls(options: { hostname: string; port: number; caCerts?: string[] }): Promise<DenoConn>;
  env: { toObject(): Record<string, string> };
  build: { os: string };
}

/** Deno's global namespace (only called on Deno). */
export function deno(): DenoApi {
  return (globalThis as unknown as { Deno: DenoApi }).Deno;
}
