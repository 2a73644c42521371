/**
 * Asking a quality example of a running `ctxr serve --model` (issue 12), over HTTP
 * only: the warm-up that caches every chunk after other neighbours, then the
 * measured question under a KV policy. Shared by scripts/bench-quality.ts and
 * test/quality/qualityModel.test.ts, so both measure the same thing.
 *
 * Warm-up. The measured request must reuse chunk KV computed after *other*
 * neighbours, so first the documents are sent in another order (`warmupOrder`):
 * dependence examples use their own `warmOrder` (the referrer follows another
 * record there, so its cached KV holds a stale value); the other families a seeded
 * shuffle whose first document differs (so no chunk but the head is an exact
 * prefix). The warm-up runs with the storing policy (default `cachecraft`, at
 * recompute ratio 0 for the ratio policies): the chunks, none of them cached yet,
 * are computed and stored back after the first token; their measured shift comes
 * in that store-back (`--reuse-scoring sync`) or in the engine's idle time, for
 * every storing policy (issue 31, item 1). Policy `full` stores nothing
 * (managedPrefill leaves the cache alone under `full`): the warm-up reports how
 * many chunks it stored (ctxr_kv_stored_total in /metrics), so a caller can tell.
 *
 * Store-back of the measured requests. `full` stores nothing; `none`, `cachecraft`,
 * `prophet` and `epic` store only chunks they computed (none, once warmed up); `prefix`
 * computes and stores every chunk *in the measured order*, which would hand the next
 * policy correct (or exact-prefix) KV. So of one example's cells, run `prefix` last
 * (`orderCells` does it), or warm up again.
 */
import { ANSWER_END, type QualityExample } from "./qualityTasks.ts";
import { QualityRandom } from "./qualityRandom.ts";

export type QualityPolicy = "full" | "prefix" | "none" | "cachecraft" | "prophet" | "epic";

/** Policies with a recompute ratio. */
export const RATIO_POLICIES: readonly QualityPolicy[] = ["cachecraft", "prophet", "epic"];

/** One measured configuration. */
export interface QualityCell {
  policy: QualityPolicy;
  /** recompute_ratio (cachecraft, prophet, epic). */
  ratio?: number;
  /** ctxr.kv_budget: sparse decode over this share of the KV (absent: dense). */
  kvBudget?: number;
}

/** usage.ctxr as the server reports it (the fields read here). */
export interface CtxrUsage {
  prompt_tokens_prefix_reused: number;
  prompt_tokens_chunk_reused: number;
  prompt_tokens_recomputed: number;
  prompt_tokens_computed: number;
  ttft_ms: number;
  policy?: string;
  /** Segments (the head and documents) placed from the chunk cache, by tier. */
  tier_hits?: Record<string, number>;
  /** Reused chunks whose variant had no measured shift yet (they used the attention scores). */
  chunks_unscored?: number;
  sparse_decode_steps?: number;
  sparse_reconstructions?: number;
}

/** What one warm-up left in the cache. */
export interface WarmUpResult {
  storer: QualityPolicy;
  /** The policy the server says it served the warm-up with (usage.ctxr.policy). */
  servedPolicy: string | null;
  /** The example's documents (one chunk each). */
  documents: number;
  /** Variants the chunk cache stored during the warm-up (the increase of ctxr_kv_stored_total). */
  chunksStored: number;
}

export interface QualityAnswer {
  text: string;
  correct: boolean;
  /** dependence: the answer equals the stale neighbour's value. */
  stale: boolean;
  /** Chunk KV was taken from the cache at a new position (chunk_reused + recomputed > 0). */
  chunksReused: boolean;
  promptTokens: number;
  usage: CtxrUsage | null;
}

/** A stable label: "full", "prophet@0.2", "full kv_budget 0.02". */
export function cellLabel(cell: QualityCell): string {
  let label = cell.ratio === undefined ? cell.policy : `${cell.policy}@${cell.ratio}`;
  if (cell.kvBudget !== undefined) label += ` kv_budget ${cell.kvBudget}`;
  return label;
}

/** Policies that must find the warmed chunks in the cache (so a miss is worth counting). */
export function expectsChunkReuse(cell: QualityCell): boolean {
  return cell.policy === "none" || cell.policy === "cachecraft" || cell.policy === "prophet" || cell.policy === "epic";
}

/** The cells of one example in a safe order: `prefix` (which stores the measured order) last. */
export function orderCells(cells: readonly QualityCell[]): QualityCell[] {
  return [...cells.filter((c) => c.policy !== "prefix"), ...cells.filter((c) => c.policy === "prefix")];
}

/** Document indices in the order the warm-up sends them. */
export function warmupOrder(example: QualityExample, shuffleSeed = 0x7a3c1d): number[] {
  if (example.warmOrder !== undefined) return example.warmOrder;
  const identity = example.documents.map((_, d) => d);
  if (identity.length < 2) return identity;
  const random = new QualityRandom((example.seed ^ shuffleSeed) >>> 0);
  let order: number[];
  do order = random.shuffled(identity);
  while (order[0] === 0);
  return order;
}

export class QualityClient {
  constructor(readonly baseUrl: string) {}

  private async complete(body: Record<string, unknown>): Promise<any> {
    const response = await fetch(`${this.baseUrl}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const text = await response.text();
    if (response.status !== 200) throw new Error(`POST /v1/completions: ${response.status} ${text.slice(0, 500)}`);
    return JSON.parse(text);
  }

  /** The chunk cache's stored-variant counter (ctxr_kv_stored_total). */
  async storedVariants(): Promise<number> {
    const response = await fetch(`${this.baseUrl}/metrics`);
    const text = await response.text();
    if (response.status !== 200) throw new Error(`GET /metrics: ${response.status} ${text.slice(0, 200)}`);
    const match = /^ctxr_kv_stored_total (\d+)$/m.exec(text);
    if (match === null) throw new Error("GET /metrics: no ctxr_kv_stored_total (is the server running --model?)");
    return Number(match[1]);
  }

  /** /v1/stats engine.reuse_scoring: shift measurements waiting, and scored so far. */
  async scoringQueue(): Promise<{ pending: number; scored: number }> {
    const response = await fetch(`${this.baseUrl}/v1/stats`);
    const text = await response.text();
    if (response.status !== 200) throw new Error(`GET /v1/stats: ${response.status} ${text.slice(0, 200)}`);
    const scoring = JSON.parse(text).engine?.reuse_scoring;
    if (scoring === undefined) throw new Error("GET /v1/stats: no engine.reuse_scoring (is the server running --model?)");
    return { pending: scoring.jobs?.shift_scoring?.pending ?? 0, scored: scoring.measurements?.scored ?? 0 };
  }

  /**
   * A one-token request (policy full: it neither reuses nor stores) that answers only after the
   * engine has finished what it was doing: a store-back, or a background piece (a live request
   * waits for the one that runs).
   */
  private async fence(prompt: string): Promise<void> {
    await this.complete({ prompt, temperature: 0, max_tokens: 1, ctxr: { policy: "full" } });
  }

  /**
   * Waits until the engine has no shift measurement pending or running (`--reuse-scoring idle`
   * runs them in its idle time), polling every `pollMs`; throws after `timeoutMs`. Returns the
   * milliseconds waited. `pending` drops when a job starts, so a fence then waits out the one
   * that may still run.
   */
  async settleScoring(timeoutMs = 30_000, pollMs = 5): Promise<number> {
    const started = performance.now();
    for (;;) {
      if ((await this.scoringQueue()).pending === 0) {
        await this.fence("settle");
        if ((await this.scoringQueue()).pending === 0) return performance.now() - started;
      }
      if (performance.now() - started > timeoutMs) throw new Error(`shift measurements still pending after ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  }

  /**
   * Caches the example's chunks after other neighbours (see the header), with a request of the
   * storing policy. The response comes at the first token, before the store-back: a one-token
   * request of the question alone (policy full, which neither reuses nor stores) follows, and
   * answers only after the engine has finished the warm-up, store-back included.
   */
  async warmUp(example: QualityExample, storer: QualityPolicy = "cachecraft", order: readonly number[] = warmupOrder(example)): Promise<WarmUpResult> {
    const before = await this.storedVariants();
    const ctxr: Record<string, unknown> = { policy: storer };
    if (RATIO_POLICIES.includes(storer)) ctxr.recompute_ratio = 0;
    const body = await this.complete({ segments: [...order.map((d) => example.documents[d]!), example.question], temperature: 0, max_tokens: 1, ctxr });
    await this.fence(example.question);
    return { storer, servedPolicy: body.usage?.ctxr?.policy ?? null, documents: order.length, chunksStored: (await this.storedVariants()) - before };
  }

  /** The measured request: greedy, answer length + 1 tokens, stop at ANSWER_END. */
  async ask(example: QualityExample, cell: QualityCell): Promise<QualityAnswer> {
    const ctxr: Record<string, unknown> = { policy: cell.policy };
    if (cell.ratio !== undefined) ctxr.recompute_ratio = cell.ratio;
    if (cell.kvBudget !== undefined) ctxr.kv_budget = cell.kvBudget;
    const body = await this.complete({
      segments: [...example.documents, example.question],
      temperature: 0,
      max_tokens: example.answer.length + 1,
      stop: [ANSWER_END],
      ctxr,
    });
    const text: string = body.choices?.[0]?.text ?? "";
    const usage: CtxrUsage | null = body.usage?.ctxr ?? null;
    return {
      text,
      correct: text === example.answer,
      stale: example.stale !== undefined && text === example.stale,
      chunksReused: usage !== null && usage.prompt_tokens_chunk_reused + usage.prompt_tokens_recomputed > 0,
      promptTokens: body.usage?.prompt_tokens ?? 0,
      usage,
    };
  }
}
