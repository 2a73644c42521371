/**
 * An optional load model for the fake engine: one engine computes one thing at a time, as a GPU
 * does, so requests in flight slow each other.
 *
 * The engine runs forward passes ("steps") one after another, continuous batching as vLLM V1 and
 * SGLang do it with chunked prefill. A step holds one decode token of every running sequence,
 * then as many prompt tokens of the waiting sequences (first come, first served) as
 * `maxBatchedTokens` leaves room for. It takes
 *
 *   stepMs + prefillMsPerToken × prompt tokens prefilled in it + kvMsPerToken × KV tokens the decoding sequences attend to
 *
 * (a pass reads the weights once whatever the batch: `stepMs`, the whole of a small decode step;
 * prefill is compute, per token; decoding reads each running sequence's KV, per token of context).
 * A sequence is looked up in the prefix cache when its prefill is first scheduled (`admit`:
 * the prompt tokens it must compute, at least 1: the last prompt token always is); the step
 * that ends its prefill gives its first token, each decode step one more, and it leaves the
 * batch once it has all its tokens.
 *
 * LoadSchedule is the arithmetic alone (no clock, no I/O: tests drive it); EngineLoad runs it in
 * real time for the fake engine's HTTP answers.
 */
import { sleep } from "../../../src/runtime/sleep.ts";

export interface EngineLoadCosts {
  /** A forward pass's fixed cost (the weights read once), ms: about one decode step of a small batch. */
  stepMs: number;
  /** Per prompt token prefilled in a step, ms. */
  prefillMsPerToken: number;
  /** Per token of context (prompt + tokens so far) of each decoding sequence, ms: reading its KV. */
  kvMsPerToken: number;
  /** Tokens one step computes at most (vLLM's max_num_batched_tokens): decode tokens first, then prompt chunks. */
  maxBatchedTokens: number;
}

/**
 * Defaults, on the time scale of scripts/bench-routing.ts (prefill 0.002 ms per uncached token).
 * A Llama-3-8B-class model on an H100 prefills about 25,000 tokens/s (0.04 ms a token) and takes
 * about 7 ms per decode step of a small batch (16 GB of weights at 3.35 TB/s, plus overheads):
 * a step costs as much as prefilling ~170 tokens. Scaled to 0.002 ms a prefill token, a step is
 * 0.35 ms. Its KV (128 KiB a token with grouped-query attention) reads in ~0.04 µs a token, a
 * thousandth of a prefill token: 0.000002 ms here. Per generated token, a sequence in a batch of
 * 8 costs 0.35 / 8 ≈ 0.044 ms, ~20× a prefill token (and ~170× alone). 8,192 batched tokens, vLLM's
 * default for online serving.
 */
export const DEFAULT_ENGINE_LOAD: EngineLoadCosts = {
  stepMs: 0.35,
  prefillMsPerToken: 0.002,
  kvMsPerToken: 0.000002,
  maxBatchedTokens: 8192,
};

interface Sequence {
  id: number;
  promptTokens: number;
  outputTokens: number;
  /** Prompt tokens still to compute (null: not admitted yet). */
  toPrefill: number | null;
  /** Tokens generated so far. */
  generated: number;
}

/** One step as planned: its duration and what it computes. */
export interface Step {
  ms: number;
  /** Ids decoding one token each. */
  decoding: number[];
  /** Prompt tokens prefilled, by id (in queue order). */
  prefilling: [id: number, tokens: number][];
}

/** What a finished step produced: per id, tokens generated so far (the first token ends a prefill), and the ids done. */
export interface StepResult {
  tokens: [id: number, generated: number][];
  finished: number[];
}

export class LoadSchedule {
  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  private readonly byId = new Map<number, Sequence>();
  private planned: Step | null = null;

  constructor(
    readonly costs: EngineLoadCosts,
    /** Looks a sequence's prompt up in the prefix cache when its prefill is first scheduled: the prompt tokens not cached. */
    private readonly admit: (id: number) => number,
  ) {}

  /** A request arrives: `promptTokens` to read, `outputTokens` (≥ 1) to generate. */
  submit(id: number, promptTokens: number, outputTokens: number): void {
    if (this.byId.has(id)) throw new Error(`LoadSchedule: sequence ${id} submitted twice`);
    const sequence: Sequence = { id, promptTokens, outputTokens: Math.max(1, outputTokens), toPrefill: null, generated: 0 };
    this.byId.set(id, sequence);
    this.waiting.push(sequence);
  }

  get idle(): boolean {
    return this.waiting.length === 0 && this.running.length === 0;
  }

  /** Sequences submitted and not finished. */
  get size(): number {
    return this.byId.size;
  }

  /** Plans the next step (null when idle). Must be followed by finish() before the next plan. */
  plan(): Step | null {
    if (this.planned !== null) throw new Error("LoadSchedule: the step planned before is not finished");
    if (this.idle) return null;
    const { stepMs, prefillMsPerToken, kvMsPerToken, maxBatchedTokens } = this.costs;
    const decoding = this.running.map((s) => s.id);
    const context = this.running.reduce((n, s) => n + s.promptTokens + s.generated, 0);
    let budget = Math.max(0, maxBatchedTokens - decoding.length);
    const prefilling: [number, number][] = [];
    let prefilled = 0;
    for (const sequence of this.waiting) {
      if (budget === 0) break;
      if (sequence.toPrefill === null) sequence.toPrefill = Math.max(1, Math.min(sequence.promptTokens, this.admit(sequence.id)));
      const take = Math.min(budget, sequence.toPrefill);
      prefilling.push([sequence.id, take]);
      prefilled += take;
      budget -= take;
    }
    this.planned = { ms: stepMs + prefillMsPerToken * prefilled + kvMsPerToken * context, decoding, prefilling };
    return this.planned;
  }

  /** The planned step is done: applies it. */
  finish(): StepResult {
    const step = this.planned;
    if (step === null) throw new Error("LoadSchedule: no step planned");
    this.planned = null;
    const result: StepResult = { tokens: [], finished: [] };
    const produced = (s: Sequence) => {
      s.generated++;
      result.tokens.push([s.id, s.generated]);
      if (s.generated >= s.outputTokens) {
        result.finished.push(s.id);
        this.byId.delete(s.id);
        return false;
      }
      return true;
    };
    // Every running sequence decoded in this step (submit only adds to the waiting ones).
    const stillRunning = this.running.filter(produced);
    this.running.length = 0;
    this.running.push(...stillRunning);
    for (const [id, tokens] of step.prefilling) {
      const s = this.byId.get(id)!;
      s.toPrefill! -= tokens;
      if (s.toPrefill === 0) {
        this.waiting.splice(this.waiting.indexOf(s), 1);
        if (produced(s)) this.running.push(s);
      }
    }
    return result;
  }
}

interface Waiter {
  tokens: number;
  resolve: () => void;
}

/**
 * LoadSchedule in real time. Steps follow each other on a clock of their own that starts when
 * work arrives at an idle engine: a step ends `ms` after the one before it, whenever the timer
 * actually fires (a late timer delays the answers, not the engine), so the engine does the work
 * of the model at its rate.
 */
export class EngineLoad {
  private readonly schedule: LoadSchedule;
  private readonly generated = new Map<number, { tokens: number; waiters: Waiter[]; admit: (() => number) | null }>();
  private running = false;
  private ids = 0;

  constructor(readonly costs: EngineLoadCosts) {
    this.schedule = new LoadSchedule(costs, (id) => {
      const entry = this.generated.get(id)!;
      const admit = entry.admit!;
      entry.admit = null;
      return admit();
    });
  }

  /**
   * Queues a request; returns its id for `tokens`. `admit` is called once, when its prefill is
   * first scheduled: it looks the prompt up in the cache and answers the tokens not cached.
   */
  submit(promptTokens: number, outputTokens: number, admit: () => number): number {
    const id = ++this.ids;
    this.generated.set(id, { tokens: 0, waiters: [], admit });
    this.schedule.submit(id, promptTokens, outputTokens);
    if (!this.running) void this.run();
    return id;
  }

  /** Resolves once sequence `id` has generated `count` tokens (capped at its output length: its end). */
  tokens(id: number, count: number): Promise<void> {
    const entry = this.generated.get(id);
    if (entry === undefined || entry.tokens >= count) return Promise.resolve();
    return new Promise((resolve) => entry.waiters.push({ tokens: count, resolve }));
  }

  private async run(): Promise<void> {
    this.running = true;
    try {
      let clock = performance.now();
      for (let step = this.schedule.plan(); step !== null; step = this.schedule.plan()) {
        clock += step.ms;
        const wait = clock - performance.now();
        if (wait > 0) await sleep(wait);
        const result = this.schedule.finish();
        for (const [id, tokens] of result.tokens) this.advance(id, tokens);
        for (const id of result.finished) this.advance(id, Infinity);
      }
    } finally {
      this.running = false;
    }
  }

  private advance(id: number, tokens: number): void {
    const entry = this.generated.get(id);
    if (entry === undefined) return;
    entry.tokens = tokens;
    const ready = entry.waiters.filter((w) => w.tokens <= tokens);
    entry.waiters = entry.waiters.filter((w) => w.tokens > tokens);
    for (const w of ready) w.resolve();
    if (tokens === Infinity) this.generated.delete(id);
  }
}
