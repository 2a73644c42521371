/**
 * The native model runner as a child process (cuda/PROTOCOL.md): spawns
 * `ctxr-runner --model DIR --blocks N --block-size B --threads T [--device D] [--kv-dtype K]`,
 * waits for its unsolicited INFO frame (id 0), then sends requests on stdin and
 * matches the responses on stdout by id (the runner answers in order). Typed
 * methods per op. stderr lines go to a logger; the last ones are kept for error
 * messages.
 *
 * If the process dies, every request in flight (and every later one) rejects with
 * a RunnerCrashedError naming the exit code or signal and the last stderr lines.
 * restart() starts a fresh process (the KV cache is gone with the old one).
 */
import { spawnPiped, type PipedChild } from "../runtime/childProcess.ts";
import {
  Op,
  OP_NAMES,
  READY_ID,
  Status,
  FrameReader,
  decodeAllocResponse,
  decodeExportResponse,
  decodeForwardResponse,
  decodeInfo,
  decodeKeyScoresResponse,
  decodeKeySummaryResponse,
  decodeProfile,
  decodeText,
  encodeAlloc,
  encodeBlockPairs,
  encodeExport,
  encodeForward,
  encodeFree,
  encodeImport,
  encodeKeyScores,
  encodeKeySummary,
  encodeProfile,
  encodeRelocate,
  encodeRequest,
  ProtocolError,
  type BlockPair,
  type ForwardRequest,
  type ForwardResult,
  type KeySummary,
  type KvData,
  type KvRange,
  type OpCode,
  type RelocateRequest,
  type ResponseFrame,
  type RunnerInfo,
  type RunnerProfile,
} from "./runnerProtocol.ts";
import { sleep } from "../runtime/sleep.ts";

/** The runner's --kv-dtype (cuda/PROTOCOL.md). */
export const KV_DTYPES = ["auto", "f32", "f16"] as const;
export type KvDtypeChoice = (typeof KV_DTYPES)[number];

export interface RunnerOptions {
  /** Path of the ctxr-runner executable. */
  executable: string;
  /** Model folder (config.json, *.safetensors). */
  model: string;
  /** KV-cache blocks (default: the runner's, enough for 8,192 tokens). */
  blocks?: number;
  /** Blocks of the sliding-window group on a model with sliding layers (default: the runner's, as many as `blocks`). */
  slidingBlocks?: number;
  /** 1: keep a sliding-window model's every layer in one KV group, every position (default 2: a group per kind of layer). */
  kvGroups?: 1 | 2;
  /** Tokens per KV block (default: the runner's, 16). */
  blockSize?: number;
  /** CPU threads (default: the runner's). */
  threads?: number;
  /** "cpu" (default), "cuda" or "cuda:N". */
  device?: string;
  /** The KV cache's element type (default: the runner's "auto": f16 for a GGUF file on the CPU, else f32). */
  kvDtype?: KvDtypeChoice;
  /** More arguments for the runner. */
  extraArgs?: string[];
  /** Each stderr line of the runner (default: dropped). */
  log?: (line: string) => void;
  /** How long loading may take before the process is killed (default 10 minutes). */
  startupTimeoutMs?: number;
  /** Environment of the runner (default: this process's). */
  env?: Record<string, string | undefined>;
  /** Stderr lines kept for error messages (default 20). */
  stderrLines?: number;
}

/** The runner process exited (or could not start); `exitCode`/`signal` say how. */
export class RunnerCrashedError extends Error {
  constructor(
    message: string,
    readonly exitCode: number | null,
    readonly signal: string | null,
    readonly stderrTail: readonly string[],
  ) {
    super(message);
    this.name = "RunnerCrashedError";
  }
}

/** The runner answered a request with an error status (1 bad request, 2 out of KV blocks, 3 internal). */
export class RunnerRequestError extends Error {
  constructor(
    readonly op: string,
    readonly status: number,
    readonly runnerMessage: string,
  ) {
    super(`ctxr-runner ${op} failed (status ${status}${status === Status.OUT_OF_BLOCKS ? ", out of KV blocks" : status === Status.BAD_REQUEST ? ", bad request" : status === Status.INTERNAL ? ", internal error" : ""}): ${runnerMessage}`);
    this.name = "RunnerRequestError";
  }

  get outOfBlocks(): boolean {
    return this.status === Status.OUT_OF_BLOCKS;
  }
}

/** The runner loaded nothing: it answered its ready frame with an error (bad model folder, no GPU, ...). */
export class RunnerLoadError extends Error {
  constructor(
    message: string,
    readonly stderrTail: readonly string[],
  ) {
    super(message);
    this.name = "RunnerLoadError";
  }
}

interface Pending {
  op: OpCode;
  resolve(frame: ResponseFrame): void;
  reject(error: Error): void;
}

/** The arguments the runner is started with. */
export function runnerArgs(options: RunnerOptions): string[] {
  const args = ["--model", options.model];
  if (options.blocks !== undefined) args.push("--blocks", String(options.blocks));
  if (options.blockSize !== undefined) args.push("--block-size", String(options.blockSize));
  if (options.slidingBlocks !== undefined) args.push("--sliding-blocks", String(options.slidingBlocks));
  if (options.kvGroups !== undefined) args.push("--kv-groups", String(options.kvGroups));
  if (options.threads !== undefined) args.push("--threads", String(options.threads));
  if (options.device !== undefined && options.device !== "cpu") args.push("--device", options.device);
  if (options.kvDtype !== undefined) args.push("--kv-dtype", options.kvDtype);
  args.push(...(options.extraArgs ?? []));
  return args;
}

/** One incarnation of the child process and its request bookkeeping. */
class Incarnation {
  readonly pending = new Map<number, Pending>();
  readonly reader = new FrameReader();
  readonly stderrTail: string[] = [];
  failure: Error | null = null;
  ready!: Promise<RunnerInfo>;
  /** Resolves when the process has exited and every pending request has been settled. */
  done!: Promise<void>;
  expectedExit = false;

  constructor(
    readonly process: PipedChild,
    readonly options: RunnerOptions,
  ) {}
}

export class RunnerProcess {
  private current: Incarnation | null = null;
  private nextId = 1;
  private restarts = 0;
  private infoValue: RunnerInfo | null = null;
  private readonly exitListeners = new Set<(error: RunnerCrashedError) => void>();

  private constructor(readonly options: RunnerOptions) {}

  /** Spawns the runner and waits until it has loaded the model. */
  static async start(options: RunnerOptions): Promise<RunnerProcess> {
    const runner = new RunnerProcess(options);
    await runner.launch();
    return runner;
  }

  /** INFO as the runner sent it when it became ready. */
  get info(): RunnerInfo {
    if (this.infoValue === null) throw new Error("ctxr-runner is not started");
    return this.infoValue;
  }

  /** The process id of the current runner (null before it started). */
  get pid(): number | null {
    return this.current?.process.pid ?? null;
  }

  /** Whether the current process is running and answering. */
  get alive(): boolean {
    return this.current !== null && this.current.failure === null;
  }

  /** How many times the process was restarted. */
  get restartCount(): number {
    return this.restarts;
  }

  /** The last stderr lines of the current process. */
  get stderrTail(): readonly string[] {
    return this.current?.stderrTail ?? [];
  }

  /** Called when the process exits without being asked to (not on shutdown() or restart()). */
  onCrash(listener: (error: RunnerCrashedError) => void): () => void {
    this.exitListeners.add(listener);
    return () => this.exitListeners.delete(listener);
  }

  /** Stops the current process (if any) and starts a fresh one; requests in flight reject. */
  async restart(): Promise<RunnerInfo> {
    await this.stopCurrent();
    this.restarts++;
    return this.launch();
  }

  // -------------------------------------------------------------------------
  // Ops

  /** Asks the runner for INFO now (free_blocks is current). */
  async queryInfo(): Promise<RunnerInfo> {
    return decodeInfo((await this.call(Op.INFO)).body);
  }

  /** Allocates `count` KV blocks (all or none: RunnerRequestError with outOfBlocks otherwise). */
  async alloc(count: number, group = 0): Promise<number[]> {
    return decodeAllocResponse((await this.call(Op.ALLOC, encodeAlloc(count, group))).body, count);
  }

  /** Frees blocks of KV group `group` (0: the only one, or the full-attention layers'; 1: the sliding-window layers'). */
  async free(ids: readonly number[], group = 0): Promise<void> {
    await this.call(Op.FREE, encodeFree(ids, group));
  }

  async copy(pairs: readonly BlockPair[]): Promise<void> {
    await this.call(Op.COPY, encodeBlockPairs(pairs));
  }

  async move(pairs: readonly BlockPair[]): Promise<void> {
    await this.call(Op.MOVE, encodeBlockPairs(pairs));
  }

  async forward(request: ForwardRequest): Promise<ForwardResult> {
    const info = this.info;
    const frame = await this.call(Op.FORWARD, encodeForward(request));
    return decodeForwardResponse(frame.body, request, info);
  }

  async export(range: KvRange): Promise<KvData> {
    const info = this.info;
    this.checkSlidingTables("EXPORT", range.slidingTable !== undefined);
    const frame = await this.call(Op.EXPORT, encodeExport(range));
    return decodeExportResponse(frame.body, range.count, info);
  }

  async import(range: KvRange, data: KvData): Promise<void> {
    this.checkSlidingTables("IMPORT", range.slidingTable !== undefined);
    await this.call(Op.IMPORT, encodeImport(range, data, this.info));
  }

  /** Copies K/V between sequence entries, K re-rotated to new positions (RELOCATE). */
  async relocate(request: RelocateRequest): Promise<void> {
    this.checkSlidingTables("RELOCATE", request.srcSlidingTable !== undefined && request.dstSlidingTable !== undefined);
    await this.call(Op.RELOCATE, encodeRelocate(request));
  }

  /** A span op on a runner with two KV groups addresses both: its sliding tables must be given (and only then). */
  private checkSlidingTables(op: string, given: boolean): void {
    const twoGroups = this.info.kv_groups !== undefined;
    if (twoGroups && !given) throw new ProtocolError(`${op}: this model has two KV cache groups (sliding-window layers); give the sequence's sliding table too`);
    if (!twoGroups && given) throw new ProtocolError(`${op}: a sliding table was given but this model has one KV cache group`);
  }

  /** Per block: its written slot count and mean K without RoPE over them, all layers (KEY_SUMMARY). */
  async keySummary(blocks: readonly number[]): Promise<KeySummary> {
    const info = this.info;
    const frame = await this.call(Op.KEY_SUMMARY, encodeKeySummary(blocks));
    return decodeKeySummaryResponse(frame.body, blocks.length, info);
  }

  /** Per slot of each block: K without RoPE dotted with `anchor`, summed over layers; -Infinity where unwritten (KEY_SCORES). */
  async keyScores(blocks: readonly number[], anchor: Float32Array): Promise<Float32Array> {
    const info = this.info;
    const frame = await this.call(Op.KEY_SCORES, encodeKeyScores(blocks, anchor, info));
    return decodeKeyScoresResponse(frame.body, blocks.length, info);
  }

  /** The FORWARD profile since the previous call (then zeroed); `on` switches profiling for later FORWARDs. */
  async profile(on: boolean): Promise<RunnerProfile> {
    return decodeProfile((await this.call(Op.PROFILE, encodeProfile(on))).body);
  }

  /** Asks the runner to exit, waits for it (killing it after `graceMs`). */
  async shutdown(graceMs = 5000): Promise<void> {
    const incarnation = this.current;
    if (incarnation === null) return;
    incarnation.expectedExit = true;
    // The grace covers the SHUTDOWN call too: a runner busy with queued work (or one that stopped
    // answering) is killed after graceMs instead of holding the caller forever.
    const timer = setTimeout(() => incarnation.process.kill("SIGKILL"), graceMs);
    if (incarnation.failure === null) {
      try {
        await Promise.race([this.call(Op.SHUTDOWN), incarnation.done]);
      } catch {
        // already gone
      }
    }
    await incarnation.done;
    clearTimeout(timer);
  }

  /** Kills the process at once (SIGKILL unless told otherwise) and waits until it is gone. */
  async kill(signal: NodeJS.Signals | number = "SIGKILL"): Promise<void> {
    const incarnation = this.current;
    if (incarnation === null) return;
    incarnation.expectedExit = true;
    incarnation.process.kill(signal);
    await incarnation.done;
  }

  // -------------------------------------------------------------------------

  /** Sends one request and resolves with its successful response frame. */
  private call(op: OpCode, body?: Uint8Array): Promise<ResponseFrame> {
    const incarnation = this.current;
    if (incarnation === null) return Promise.reject(new Error("ctxr-runner is not started"));
    if (incarnation.failure !== null) return Promise.reject(incarnation.failure);
    const id = this.nextId;
    this.nextId = this.nextId >= 0xfffffffe ? 1 : this.nextId + 1;
    const name = OP_NAMES[op] ?? `op ${op}`;
    return new Promise<ResponseFrame>((resolve, reject) => {
      incarnation.pending.set(id, {
        op,
        resolve: (frame) => (frame.status === Status.OK ? resolve(frame) : reject(new RunnerRequestError(name, frame.status, decodeText(frame.body)))),
        reject,
      });
      // A write fails when the process is gone (or going): the request stays pending and is
      // rejected with the exit's RunnerCrashedError, which says how it ended.
      const writeFailed = () => {
        const process = incarnation.process;
        if (process.exitCode === null && process.signalCode === null) process.kill("SIGKILL");
      };
      try {
        const stdin = incarnation.process.stdin;
        stdin.write(encodeRequest(op, id, body));
        void Promise.resolve(stdin.flush()).catch(writeFailed);
      } catch {
        writeFailed();
      }
    });
  }

  private async launch(): Promise<RunnerInfo> {
    const options = this.options;
    const argv = [options.executable, ...runnerArgs(options)];
    let process: PipedChild;
    try {
      process = spawnPiped(argv, { env: options.env ?? globalThis.process.env });
    } catch (error) {
      throw new RunnerCrashedError(`cannot start ctxr-runner (${options.executable}): ${(error as Error).message}`, null, null, []);
    }
    const incarnation = new Incarnation(process, options);
    this.current = incarnation;

    let readyResolve!: (info: RunnerInfo) => void;
    let readyReject!: (error: Error) => void;
    incarnation.ready = new Promise<RunnerInfo>((resolve, reject) => {
      readyResolve = resolve;
      readyReject = reject;
    });
    // The ready frame is answered like a request with id 0.
    incarnation.pending.set(READY_ID, {
      op: Op.INFO,
      resolve: (frame) => {
        if (frame.status !== Status.OK) {
          incarnation.expectedExit = true;
          readyReject(new RunnerLoadError(`ctxr-runner could not load ${options.model}: ${decodeText(frame.body)}`, incarnation.stderrTail.slice()));
          return;
        }
        try {
          readyResolve(decodeInfo(frame.body));
        } catch (error) {
          readyReject(error as Error);
        }
      },
      reject: readyReject,
    });

    const stderrDone = this.readStderr(incarnation);
    const stdoutDone = this.readStdout(incarnation);
    incarnation.done = (async () => {
      const code = await process.exited;
      // Responses written before the exit are still delivered; stderr explains the exit.
      await stdoutDone;
      await Promise.race([stderrDone, sleep(500)]);
      const signal = process.signalCode === null || process.signalCode === undefined ? null : String(process.signalCode);
      const how = signal !== null ? `was killed by ${signal}` : `exited with code ${code}`;
      const tail = incarnation.stderrTail.slice();
      const lastLines = tail.length === 0 ? "" : `; last stderr lines:\n${tail.join("\n")}`;
      const error = new RunnerCrashedError(`ctxr-runner (pid ${process.pid}) ${how}${lastLines}`, signal === null ? code : null, signal, tail);
      const unexpected = !incarnation.expectedExit && incarnation.failure === null;
      this.fail(incarnation, error);
      if (unexpected && this.current === incarnation) {
        for (const listener of this.exitListeners) listener(error);
      }
    })();

    const timeoutMs = options.startupTimeoutMs ?? 600_000;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        incarnation.expectedExit = true;
        process.kill("SIGKILL");
        reject(new RunnerCrashedError(`ctxr-runner did not load ${options.model} within ${Math.round(timeoutMs / 1000)} s`, null, null, incarnation.stderrTail.slice()));
      }, timeoutMs);
    });
    try {
      const info = await Promise.race([incarnation.ready, timeout]);
      this.infoValue = info;
      return info;
    } catch (error) {
      // A failed load: the process exits (or is made to); wait so no stray child remains.
      incarnation.expectedExit = true;
      if (process.exitCode === null && process.signalCode === null) process.kill("SIGKILL");
      await incarnation.done;
      if (error instanceof RunnerCrashedError) {
        throw new RunnerCrashedError(`ctxr-runner failed while loading ${options.model}: ${error.message.replace(/^ctxr-runner (\(pid \d+\) )?/, "")}`, error.exitCode, error.signal, error.stderrTail);
      }
      throw error;
    } finally {
      if (timer !== null) clearTimeout(timer);
    }
  }

  private async readStdout(incarnation: Incarnation): Promise<void> {
    try {
      for await (const chunk of incarnation.process.stdout) {
        let frames: ResponseFrame[];
        try {
          frames = incarnation.reader.push(chunk);
        } catch (error) {
          this.fail(incarnation, new RunnerCrashedError(`ctxr-runner sent a malformed frame: ${(error as Error).message}`, null, null, incarnation.stderrTail.slice()));
          incarnation.process.kill("SIGKILL");
          return;
        }
        for (const frame of frames) {
          const pending = incarnation.pending.get(frame.id);
          if (pending === undefined) {
            this.fail(incarnation, new RunnerCrashedError(`ctxr-runner answered unknown request id ${frame.id}`, null, null, incarnation.stderrTail.slice()));
            incarnation.process.kill("SIGKILL");
            return;
          }
          incarnation.pending.delete(frame.id);
          pending.resolve(frame);
        }
      }
    } catch {
      // the pipe broke: the exit handler reports
    }
  }

  private async readStderr(incarnation: Incarnation): Promise<void> {
    const decoder = new TextDecoder();
    const keep = incarnation.options.stderrLines ?? 20;
    let partial = "";
    const line = (text: string) => {
      incarnation.stderrTail.push(text);
      if (incarnation.stderrTail.length > keep) incarnation.stderrTail.shift();
      incarnation.options.log?.(text);
    };
    try {
      for await (const chunk of incarnation.process.stderr) {
        partial += decoder.decode(chunk, { stream: true });
        let newline: number;
        while ((newline = partial.indexOf("\n")) >= 0) {
          line(partial.slice(0, newline).replace(/\r$/, ""));
          partial = partial.slice(newline + 1);
        }
      }
    } catch {
      // closed
    }
    partial += decoder.decode();
    if (partial !== "") line(partial);
  }

  /** Marks the incarnation failed and rejects everything pending with `error`. */
  private fail(incarnation: Incarnation, error: Error): void {
    if (incarnation.failure === null) incarnation.failure = error;
    const pending = [...incarnation.pending.values()];
    incarnation.pending.clear();
    for (const request of pending) request.reject(incarnation.failure);
  }

  private async stopCurrent(): Promise<void> {
    const incarnation = this.current;
    if (incarnation === null) return;
    incarnation.expectedExit = true;
    if (incarnation.failure === null && incarnation.process.exitCode === null && incarnation.process.signalCode === null) {
      incarnation.process.kill("SIGKILL");
    }
    await incarnation.done;
  }
}
