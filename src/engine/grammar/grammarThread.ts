/**
 * The request thread's side of the grammar thread (grammarWorker.ts, a Bun Worker owning
 * xgrammar). Requests are queued and answered in order; the one at the head is the one the thread
 * is working on, and it has a time limit (a compile's or a step's). Past it, or after xgrammar
 * aborts (its WebAssembly memory may then be corrupt: issue 27), the thread is terminated and a
 * fresh one started on the next request: the request at fault fails, every other one queued fails
 * with GrammarThreadRestartedError so that its matcher can be rebuilt on the new thread
 * (grammarConstraint.ts replays its accepted tokens).
 */
import { GRAMMAR_WORKER_ENTRY, insideSingleBinary } from "../../workerEntries.ts";
import { GrammarThreadError, GrammarThreadRestartedError, GrammarTimeLimitError } from "./grammarErrors.ts";
import type { GrammarThreadIn, GrammarThreadOut, GrammarVocabulary } from "./grammarThreadMessages.ts";
import { startModuleWorker, unrefWorker } from "../../runtime/workers.ts";

/** Loading xgrammar and preparing the vocabulary (a large vocabulary takes seconds). */
const INIT_LIMIT_MS = 120_000;

function workerEntry(): string {
  return insideSingleBinary() ? GRAMMAR_WORKER_ENTRY : new URL("./grammarWorker.ts", import.meta.url).href;
}

interface Pending {
  message: GrammarThreadIn;
  limitMs: number;
  work: "compile" | "step" | "init";
  resolve(reply: GrammarThreadOut): void;
  reject(error: Error): void;
}

export class GrammarThread {
  private worker: Worker | null = null;
  private readonly queue: Pending[] = [];
  private headTimer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  /** Bumped each time a thread is started: matchers opened on an earlier one must be rebuilt. */
  generation = 0;
  /** Threads replaced after an abort, a time limit or a crash. */
  restarts = 0;

  constructor(
    private readonly vocabulary: () => GrammarVocabulary,
    private readonly log: (text: string) => void = () => {},
  ) {}

  /** Sends a request; its answer, or GrammarTimeLimitError / GrammarThreadError / GrammarThreadRestartedError. */
  request(message: GrammarThreadIn, limitMs: number, work: "compile" | "step"): Promise<GrammarThreadOut> {
    if (this.closed) return Promise.reject(new GrammarThreadRestartedError("the server is shutting down"));
    if (this.worker === null) this.start();
    return this.enqueue(message, limitMs, work);
  }

  /** A request whose answer nobody waits for (closing a matcher); dropped when the thread it was for is gone. */
  post(message: GrammarThreadIn, generation: number): void {
    if (this.closed || this.worker === null || generation !== this.generation) return;
    this.enqueue(message, 60_000, "step").catch(() => {});
  }

  close(): void {
    this.closed = true;
    this.stop(new GrammarThreadRestartedError("the server is shutting down"));
  }

  private enqueue(message: GrammarThreadIn, limitMs: number, work: Pending["work"]): Promise<GrammarThreadOut> {
    return new Promise((resolve, reject) => {
      this.queue.push({ message, limitMs, work, resolve, reject });
      this.worker!.postMessage(message);
      if (this.queue.length === 1) this.armHead();
    });
  }

  private start(): void {
    const worker = startModuleWorker(workerEntry());
    this.worker = worker;
    this.generation++;
    worker.addEventListener("message", (event: MessageEvent<GrammarThreadOut>) => this.received(worker, event.data));
    worker.addEventListener("error", (event) => this.crashed(worker, (event as ErrorEvent).message ?? String(event)));
    worker.addEventListener("close", () => this.crashed(worker, "the thread exited"));
    unrefWorker(worker);
    this.enqueue({ kind: "init", vocabulary: this.vocabulary() }, INIT_LIMIT_MS, "init").catch(() => {});
  }

  private armHead(): void {
    if (this.headTimer !== null) clearTimeout(this.headTimer);
    this.headTimer = null;
    const head = this.queue[0];
    if (head === undefined) return;
    const worker = this.worker;
    this.headTimer = setTimeout(() => {
      if (this.worker !== worker || this.queue[0] !== head) return;
      this.queue.shift();
      const error = head.work === "init" ? new GrammarThreadError(`the grammar thread did not start within ${head.limitMs} ms`, true) : new GrammarTimeLimitError(head.limitMs, head.work);
      head.reject(error);
      this.replace(error.message);
    }, head.limitMs);
  }

  private received(worker: Worker, reply: GrammarThreadOut): void {
    if (worker !== this.worker) return;
    const head = this.queue.shift();
    this.armHead();
    if (head === undefined) return;
    if (reply.kind !== "error") return head.resolve(reply);
    head.reject(new GrammarThreadError(reply.message, reply.poisoned));
    if (reply.poisoned || head.work === "init") this.replace(`xgrammar aborted: ${reply.message}`);
  }

  private crashed(worker: Worker, why: string): void {
    if (worker !== this.worker) return;
    this.replace(why);
  }

  /** Terminates the thread; whatever was queued fails as restarted (the next request starts a fresh one). */
  private replace(why: string): void {
    if (this.closed) return;
    this.restarts++;
    this.log(`ctxr: the grammar thread is replaced (${why})`);
    this.stop(new GrammarThreadRestartedError(why));
  }

  private stop(error: Error): void {
    if (this.headTimer !== null) clearTimeout(this.headTimer);
    this.headTimer = null;
    const worker = this.worker;
    this.worker = null;
    worker?.terminate();
    for (const pending of this.queue.splice(0)) pending.reject(error);
  }
}
