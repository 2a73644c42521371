/**
 * The request thread's side of the tokenizer thread (tokenizerWorker.ts): long prompts are sent
 * there to be tokenized, so that a megabyte prompt (about half a second of tokenizing) never
 * stalls /healthz or other requests (issue 27). The thread starts on the first request and loads
 * the model's tokenizer itself. A tokenizing error comes back as the same class it was raised as
 * (ChatTemplateError, ModelTokenizerError); a thread that crashes fails its pending requests with
 * TokenizerThreadError and is started afresh on the next one, and one that cannot load the
 * tokenizer (or keeps crashing) is given up: TokenizerThreadError at once, so callers tokenize
 * inline.
 */
import { TOKENIZER_WORKER_ENTRY, insideSingleBinary } from "../../workerEntries.ts";
import type { ModelSource } from "../modelSource.ts";
import { ChatTemplateError, ModelTokenizerError, type ChatTemplateMessage, type ChatTemplateOptions } from "../modelTokenizer.ts";
import type { TokenizerThreadIn, TokenizerThreadOut } from "./tokenizerThreadMessages.ts";
import { startModuleWorker, unrefWorker } from "../../runtime/workers.ts";

/** Crashes after which the thread is given up. */
const MAX_RESTARTS = 3;

/** The thread failed (not the text): the caller may tokenize inline instead. */
export class TokenizerThreadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenizerThreadError";
  }
}

function workerEntry(): string {
  return insideSingleBinary() ? TOKENIZER_WORKER_ENTRY : new URL("./tokenizerWorker.ts", import.meta.url).href;
}

interface Pending {
  resolve(value: Int32Array | string | null): void;
  reject(error: Error): void;
}

export class TokenizerThread {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private restarts = 0;
  /** Why the thread was given up (null: it is usable). */
  private givenUp: string | null = null;

  constructor(
    private readonly source: ModelSource,
    private readonly log: (line: string) => void = () => {},
  ) {}

  /** A text's ids (`bos` first when given and the text did not encode it). */
  encode(text: string, bos: number | null): Promise<Int32Array> {
    return this.request((id) => ({ kind: "encode", id, text, bos }));
  }

  /** A chat's ids through the chat template (`bos` as for encode). */
  encodeChat(messages: readonly ChatTemplateMessage[], options: ChatTemplateOptions, bos: number | null): Promise<Int32Array> {
    return this.request((id) => ({ kind: "chat", id, messages: [...messages], options, bos }));
  }

  /** A chat rendered by the chat template (ChatTemplateError / ModelTokenizerError as applyChatTemplate raises them). */
  renderChat(messages: readonly ChatTemplateMessage[], options: ChatTemplateOptions): Promise<string> {
    return this.request((id) => ({ kind: "render", id, messages: [...messages], options }));
  }

  /** The text ids stand for exactly, or null (ModelTokenizer.exactText). */
  exactText(ids: readonly number[]): Promise<string | null> {
    return this.request((id) => ({ kind: "text", id, ids: Int32Array.from(ids) }));
  }

  /** Requests waiting for their ids. */
  get waiting(): number {
    return this.pending.size;
  }

  close(): void {
    this.givenUp = "the server is shutting down";
    this.stop(new TokenizerThreadError(this.givenUp));
  }

  private request<T extends Int32Array | string | null>(message: (id: number) => TokenizerThreadIn): Promise<T> {
    if (this.givenUp !== null) return Promise.reject(new TokenizerThreadError(this.givenUp));
    if (this.worker === null) {
      try {
        this.start();
      } catch (error) {
        this.giveUp(`the tokenizer thread cannot start: ${(error as Error).message}`);
        return Promise.reject(new TokenizerThreadError(this.givenUp!));
      }
    }
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: Int32Array | string | null) => void, reject });
      this.worker!.postMessage(message(id));
    });
  }

  private start(): void {
    const worker = startModuleWorker(workerEntry());
    this.worker = worker;
    worker.addEventListener("message", (event: MessageEvent<TokenizerThreadOut>) => this.received(worker, event.data));
    worker.addEventListener("error", (event) => this.crashed(worker, (event as ErrorEvent).message ?? String(event)));
    worker.addEventListener("close", () => this.crashed(worker, "the thread exited"));
    unrefWorker(worker);
    worker.postMessage({ kind: "init", source: this.source } satisfies TokenizerThreadIn);
  }

  private received(worker: Worker, reply: TokenizerThreadOut): void {
    if (worker !== this.worker) return;
    if (reply.kind === "ready") return;
    if (reply.kind === "failed") return this.giveUp(`the tokenizer thread cannot load the tokenizer: ${reply.message}`);
    const pending = this.pending.get(reply.id);
    if (pending === undefined) return;
    this.pending.delete(reply.id);
    if (reply.kind === "ids") return pending.resolve(reply.ids);
    if (reply.kind === "text") return pending.resolve(reply.text);
    pending.reject(reply.error === "chat_template" ? new ChatTemplateError(reply.message) : reply.error === "tokenizer" ? new ModelTokenizerError(reply.message) : new Error(reply.message));
  }

  private crashed(worker: Worker, why: string): void {
    if (worker !== this.worker) return;
    this.restarts++;
    if (this.restarts >= MAX_RESTARTS) return this.giveUp(`the tokenizer thread crashed ${this.restarts} times (last: ${why})`);
    this.log(`ctxr: the tokenizer thread is restarted (${why})`);
    this.stop(new TokenizerThreadError(`the tokenizer thread crashed: ${why}`));
  }

  private giveUp(why: string): void {
    this.givenUp = why;
    this.log(`ctxr: ${why}; prompts are tokenized on the request thread`);
    this.stop(new TokenizerThreadError(why));
  }

  private stop(error: Error): void {
    const worker = this.worker;
    this.worker = null;
    worker?.terminate();
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const request of pending) request.reject(error);
  }
}
