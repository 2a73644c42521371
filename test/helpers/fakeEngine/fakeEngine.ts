/**
 * A fake inference engine for the KV-events tests and the routing benchmark (issue 13 item 4):
 * what vLLM or SGLang look like from a router, without a model.
 *
 * - OpenAI-compatible HTTP: POST /v1/chat/completions and /v1/completions (streamed or not; a
 *   completion prompt may be text or token ids), GET /v1/models and /health. The answer is a
 *   fixed text (or `answer(prompt)`); usage reports prompt tokens and
 *   `prompt_tokens_details.cached_tokens` from its cache.
 * - A prefix cache of `capacityBlocks` blocks of `blockSize` tokens with chained hashes, least
 *   recently used first out (fakeBlockCache.ts); `blocks` is its true content.
 * - KV events: ctxr's own publisher (a ZeroMQ PUB socket, a replay ROUTER keeping the last
 *   10,000 batches) in any layout (map, array, mixed) with bytes or integer hashes, and knobs to
 *   break it: `faults` drops or reorders live messages, `restart` starts the sequence again
 *   (reconnecting or not, with AllBlocksCleared or not), `publishPayload` / `sendFrames` put
 *   malformed or oversized messages on the wire, and `kvEvents.port` (freeTcpPort.ts) lets a
 *   subscriber dial it before it starts.
 */
import { externalBlockHash, type BlockHashEncoding, type KvEventLayout } from "../../../src/kv/kvEventBatch.ts";
import { blockHashKey, type BlockHashKey } from "../../../src/kv/kvEventDecoding.ts";
import { KvEventPublisher } from "../../../src/server/kvEventPublisher.ts";
import { openaiAnswer } from "../openaiAnswer.ts";
import { DEFAULT_ENGINE_LOAD, EngineLoad, type EngineLoadCosts } from "./engineLoad.ts";
import { FakeBlockCache, type Admission, type FakeBlock } from "./fakeBlockCache.ts";
import { folderTokenizer, simpleTokenizer, type ChatMessage, type FakeTokenizer } from "./fakeTokenizer.ts";
import { WireFaults } from "./wireFaults.ts";
import { sleep } from "../../../src/runtime/sleep.ts";
import { serveForTest } from "../httpServe.ts";
import type { HttpServer } from "../../../src/runtime/httpServer.ts";

export interface FakeKvEventsOptions {
  layout?: KvEventLayout;
  hashes?: BlockHashEncoding;
  topic?: string;
  /** Default 0: a free port. */
  port?: number;
  /** The replay socket's port (default 0: a free one; null: no replay socket). */
  replayPort?: number | null;
}

export interface FakeEngineOptions {
  /** Tokens a block (default 16, vLLM's). */
  blockSize?: number;
  /** Blocks the cache holds (default 4096). */
  capacityBlocks?: number;
  /** A model folder whose tokenizer and chat template to use (default: simpleTokenizer). */
  tokenizerDir?: string;
  model?: string;
  /** Seeds the block hashes (another seed: other hashes for the same tokens). */
  seed?: string;
  answer?: (prompt: string) => string;
  /** Simulated prefill time per prompt token not cached (default 0; requests in flight do not slow each other). Ignored with `load`. */
  prefillMsPerToken?: number;
  /**
   * The load model (engineLoad.ts; default: none): one engine computes one batch at a time,
   * prefills queued and decode steps shared by the requests in flight, answers streamed token by
   * token as they are generated. Costs not given are DEFAULT_ENGINE_LOAD's.
   */
  load?: Partial<EngineLoadCosts> | null;
  /** HTTP port (default 0: a free one). */
  port?: number;
  /** Publish KV events (default: no). */
  kvEvents?: FakeKvEventsOptions | null;
}

export interface FakeEngineStats {
  requests: number;
  promptTokens: number;
  cachedTokens: number;
}

export const FAKE_ANSWER = "This is the fake engine's answer.";

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (typeof part?.text === "string" ? part.text : "")).join("");
  return "";
}

export class FakeEngine {
  readonly cache: FakeBlockCache;
  readonly faults = new WireFaults();
  readonly stats: FakeEngineStats = { requests: 0, promptTokens: 0, cachedTokens: 0 };
  private publisher: KvEventPublisher | null = null;
  private server: HttpServer | null = null;
  private ids = 0;
  private readonly load: EngineLoad | null;

  private constructor(
    private readonly options: FakeEngineOptions,
    private readonly tokenizer: FakeTokenizer,
  ) {
    // The cache reports to whichever publisher is current (restart replaces it).
    const events = {
      stored: (blocks: Parameters<KvEventPublisher["stored"]>[0]) => this.publisher?.stored(blocks),
      removed: (hashes: readonly string[]) => this.publisher?.removed(hashes),
      cleared: () => this.publisher?.cleared(),
    };
    this.cache = new FakeBlockCache(options.blockSize ?? 16, options.capacityBlocks ?? 4096, options.seed ?? "fake-engine", events);
    this.load = options.load ? new EngineLoad({ ...DEFAULT_ENGINE_LOAD, ...options.load }) : null;
  }

  static async start(options: FakeEngineOptions = {}): Promise<FakeEngine> {
    const tokenizer = options.tokenizerDir === undefined ? simpleTokenizer : await folderTokenizer(options.tokenizerDir);
    const engine = new FakeEngine(options, tokenizer);
    if (options.kvEvents) engine.publisher = await engine.openPublisher(options.kvEvents.port ?? 0, options.kvEvents.replayPort === undefined ? 0 : options.kvEvents.replayPort);
    engine.server = serveForTest((request) => engine.fetch(request), { port: options.port });
    return engine;
  }

  get url(): string {
    return `http://127.0.0.1:${this.server!.port}`;
  }

  /** The KV events PUB endpoint (tcp://127.0.0.1:PORT), null without events. */
  get kvEventsEndpoint(): string | null {
    return this.publisher?.endpoint ?? null;
  }

  get replayEndpoint(): string | null {
    return this.publisher?.replayEndpoint ?? null;
  }

  /** `--kv-events` for this engine: the PUB endpoint, with its replay endpoint. */
  get kvEventsFlag(): string {
    return `${this.kvEventsEndpoint}${this.replayEndpoint === null ? "" : `,replay=${this.replayEndpoint}`}`;
  }

  /** The engine's publisher (publishPayload, sendFrames, stats). */
  get kvEvents(): KvEventPublisher {
    if (this.publisher === null) throw new Error("FakeEngine: started without kvEvents");
    return this.publisher;
  }

  /** The true cache contents by the engine's block hash (32 hex characters). */
  get blocks(): ReadonlyMap<string, FakeBlock> {
    return this.cache.contents;
  }

  /** The true cache contents as a subscriber names them (kvEventDecoding's BlockHashKey). */
  blockKeys(): Set<BlockHashKey> {
    const encoding = this.options.kvEvents?.hashes ?? "bytes";
    return new Set([...this.cache.contents.keys()].map((hash) => blockHashKey(externalBlockHash(hash, encoding))!));
  }

  /** A subscriber's key of an engine block hash. */
  keyOf(hash: string): BlockHashKey {
    return blockHashKey(externalBlockHash(hash, this.options.kvEvents?.hashes ?? "bytes"))!;
  }

  /** Prompt token ids of a completion prompt or a chat request's messages, as this engine tokenizes them. */
  promptIds(prompt: string | readonly ChatMessage[]): number[] {
    return this.tokenizer.promptIds(typeof prompt === "string" ? prompt : this.tokenizer.chatPrompt(prompt));
  }

  /** Runs a prompt through the cache directly (no HTTP); returns the cached tokens it found. */
  process(promptIds: readonly number[], answerIds: readonly number[] = []): number {
    const admission = this.cache.admit(promptIds, [...promptIds, ...answerIds]);
    this.cache.release(admission);
    return admission.cachedTokens;
  }

  /**
   * The engine restarts: its cache is empty and its event sequence starts again from 0, with
   * AllBlocksCleared as the first batch when `clearEvent`. `reconnect`: the publisher's sockets
   * close and open again on the same ports (a new process); otherwise they stay (a sequence that
   * goes backwards on a live connection).
   */
  async restart(options: { reconnect: boolean; clearEvent: boolean }): Promise<void> {
    if (options.reconnect && this.publisher !== null) {
      const replay = this.publisher.replayEndpoint;
      const port = Number(/:(\d+)$/.exec(this.publisher.endpoint)![1]);
      await this.publisher.close();
      this.publisher = null;
      this.cache.clear(false);
      this.publisher = await this.openPublisher(port, replay === null ? null : Number(/:(\d+)$/.exec(replay)![1]));
    } else {
      this.publisher?.flush();
      this.publisher?.restartSequence();
      this.cache.clear(false);
    }
    if (options.clearEvent) this.publisher?.cleared();
  }

  async close(): Promise<void> {
    await this.server?.stop(true);
    await this.publisher?.close();
  }

  private async openPublisher(port: number, replayPort: number | null): Promise<KvEventPublisher> {
    const events = this.options.kvEvents!;
    return KvEventPublisher.open(
      {
        endpoint: { host: "127.0.0.1", port },
        replay: replayPort === null ? null : { host: "127.0.0.1", port: replayPort },
        topic: events.topic ?? "",
        hashes: events.hashes ?? "bytes",
        layout: events.layout ?? "map",
      },
      { transmit: this.faults.transmit },
    );
  }

  private async fetch(request: Request): Promise<Response> {
    const path = new URL(request.url).pathname;
    if (request.method === "GET" && path === "/health") return new Response(null, { status: 200 });
    if (request.method === "GET" && path === "/v1/models") return Response.json({ object: "list", data: [{ id: this.model, object: "model", created: 1_700_000_000, owned_by: "fake" }] });
    const chat = path === "/v1/chat/completions";
    if (request.method !== "POST" || (!chat && path !== "/v1/completions")) return Response.json({ error: { message: `no route ${request.method} ${path}`, type: "not_found" } }, { status: 404 });
    let body: any;
    try {
      body = await request.json();
    } catch {
      return Response.json({ error: { message: "the body is not JSON", type: "invalid_request_error" } }, { status: 400 });
    }
    const promptText = chat ? this.tokenizer.chatPrompt((Array.isArray(body?.messages) ? body.messages : []).map((m: any) => ({ role: String(m?.role), content: contentText(m?.content) }))) : typeof body?.prompt === "string" ? body.prompt : null;
    const promptIds = promptText !== null ? this.tokenizer.promptIds(promptText) : Array.isArray(body?.prompt) && body.prompt.every(Number.isInteger) ? (body.prompt as number[]) : null;
    if (promptIds === null) return Response.json({ error: { message: "prompt must be a string or token ids", type: "invalid_request_error" } }, { status: 400 });
    const answer = this.options.answer?.(promptText ?? "") ?? FAKE_ANSWER;
    const answerIds = this.tokenizer.promptIds(answer);
    const pieces = answer.split(/(?<= )/);
    this.stats.requests++;
    this.stats.promptTokens += promptIds.length;
    const admit = (): Admission => {
      const admission = this.cache.admit(promptIds, [...promptIds, ...answerIds]);
      this.stats.cachedTokens += admission.cachedTokens;
      return admission;
    };
    const reply = (cachedTokens: number) =>
      openaiAnswer({
        id: `${chat ? "chatcmpl" : "cmpl"}-fake${++this.ids}`,
        model: this.model,
        chat,
        pieces,
        usage: {
          prompt_tokens: promptIds.length,
          completion_tokens: answerIds.length,
          total_tokens: promptIds.length + answerIds.length,
          prompt_tokens_details: { cached_tokens: cachedTokens },
        },
        stream: body.stream === true,
        includeUsage: body.stream_options?.include_usage === true,
      });
    if (this.load !== null) return this.loaded(this.load, promptIds.length, answerIds.length, pieces.length, admit, reply, chat);
    const admission = admit();
    try {
      const prefillMs = (this.options.prefillMsPerToken ?? 0) * (promptIds.length - admission.cachedTokens);
      if (prefillMs > 0) await sleep(prefillMs);
    } finally {
      this.cache.release(admission);
    }
    return reply(admission.cachedTokens);
  }

  /**
   * With the load model: the request is looked up in the cache when its prefill is scheduled, its
   * blocks held until its last token; a stream's chunks go as their tokens are generated (the
   * role chunk and first piece with the first token, piece i of n with token ⌈i·T/n⌉, the rest
   * with the last); a whole answer goes with the last token.
   */
  private async loaded(load: EngineLoad, promptTokens: number, outputTokens: number, pieces: number, admit: () => Admission, reply: (cachedTokens: number) => Response, chat: boolean): Promise<Response> {
    const admitted: { admission: Admission | null } = { admission: null };
    const id = load.submit(promptTokens, outputTokens, () => {
      admitted.admission = admit();
      return promptTokens - admitted.admission.cachedTokens;
    });
    void load.tokens(id, Infinity).then(() => this.cache.release(admitted.admission!));
    await load.tokens(id, 1);
    const answer = reply(admitted.admission!.cachedTokens);
    if (answer.headers.get("content-type") !== "text/event-stream") {
      await load.tokens(id, Infinity);
      return answer;
    }
    const reader = answer.body!.getReader();
    let chunk = 0;
    const gated = new ReadableStream<Uint8Array>({
      async pull(controller) {
        // Chat: chunk 0 is the role's; pieces 1..n. Completions: pieces 0..n-1. Then finish, usage, [DONE].
        const piece = chat ? chunk : chunk + 1;
        const needed = piece <= 1 ? 1 : piece <= pieces ? Math.ceil((piece * outputTokens) / pieces) : Infinity;
        chunk++;
        await load.tokens(id, needed);
        const { done, value } = await reader.read();
        if (done) controller.close();
        else controller.enqueue(value);
      },
    });
    return new Response(gated, { headers: answer.headers });
  }

  private get model(): string {
    return this.options.model ?? "fake-model";
  }
}
