/**
 * Perplexity of a model on token documents through the runner (issue 14, item 4: a quantized
 * model's perplexity against its f32 original). Each document is prefilled in chunks with its
 * KV kept, logits returned for every position, and every token after the first is scored by
 * the log-softmax of the previous position's logits (f64). A document may mark where its answer
 * starts: answer tokens are also summed apart, with the share whose argmax is the target and
 * the documents whose every answer token is the argmax (teacher-forced exact match, as
 * scripts/train-quality-model.py evaluates).
 *
 * The quality model's task text (heldOutTaskDocuments) is the training script's held-out
 * evaluation set: per family f, examples exampleSeed(EVAL_SEED + f, i), the order family
 * alternating original/annotated and dedup as eval_sets() does, each document
 * `<s> prompt answer "\n"`.
 */
import type { ModelTokenizer } from "../model/modelTokenizer.ts";
import { completionIds } from "../model/completionPrompt.ts";
import type { RunnerProcess } from "../runner/runnerProcess.ts";
import { exampleSeed } from "./qualityRandom.ts";
import { ANSWER_END, DEFAULT_RETRIEVAL_BYTES, QUALITY_FAMILIES, qualityExample, type QualityExample, type QualityFamily } from "./qualityTasks.ts";

/** scripts/train-quality-model.py's EVAL_SEED: held-out examples, never trained on. */
export const QUALITY_EVAL_SEED = 0x51a11e;

export interface PerplexityDocument {
  /** A label for per-group sums (the quality family, or "text"). */
  group: string;
  ids: number[];
  /** Index of the first answer token in `ids` (none: no answer scored apart). */
  answerStart?: number;
}

export interface NllSums {
  /** Tokens scored (every token after the first of each document). */
  tokens: number;
  /** Their summed negative log-likelihood, nats. */
  nll: number;
  /** Answer tokens scored, their summed NLL, and how many were the argmax. */
  answerTokens: number;
  answerNll: number;
  answerTop1: number;
  /** Documents with an answer, and those whose every answer token was the argmax. */
  answers: number;
  exactAnswers: number;
}

export interface PerplexityResult extends NllSums {
  documents: number;
  meanNll: number;
  perplexity: number;
  answerMeanNll: number;
  answerPerplexity: number;
  groups: Record<string, NllSums & { documents: number; meanNll: number; perplexity: number }>;
}

const emptySums = (): NllSums => ({ tokens: 0, nll: 0, answerTokens: 0, answerNll: 0, answerTop1: 0, answers: 0, exactAnswers: 0 });

function addSums(into: NllSums, from: NllSums): void {
  into.tokens += from.tokens;
  into.nll += from.nll;
  into.answerTokens += from.answerTokens;
  into.answerNll += from.answerNll;
  into.answerTop1 += from.answerTop1;
  into.answers += from.answers;
  into.exactAnswers += from.exactAnswers;
}

/** -log softmax(row)[target] in f64, and whether target is the row's argmax (ties: lowest id). */
export function tokenNll(row: ArrayLike<number>, target: number): { nll: number; top1: boolean } {
  let max = -Infinity;
  let best = 0;
  for (let i = 0; i < row.length; i++) {
    if (row[i]! > max) {
      max = row[i]!;
      best = i;
    }
  }
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i]! - max);
  return { nll: Math.log(sum) + max - row[target]!, top1: best === target };
}

/** One document's sums: prefilled in chunks of `chunk` tokens on its own block table. */
export async function documentNll(runner: RunnerProcess, document: PerplexityDocument, chunk = 512): Promise<NllSums> {
  const { ids } = document;
  const vocab = runner.info.vocab;
  const sums = emptySums();
  if (ids.length < 2) return sums;
  const answerStart = document.answerStart ?? ids.length;
  let answerExact = true;
  const table = await runner.alloc(Math.ceil(ids.length / runner.info.block_size));
  try {
    for (let start = 0; start < ids.length - 1; start += chunk) {
      const end = Math.min(ids.length, start + chunk);
      const count = end - start;
      const rows = Array.from({ length: count }, (_, i) => i);
      const indices = rows.map((i) => start + i);
      const out = await runner.forward({ sequences: [{ table, tokens: ids.slice(start, end), indices, logitRows: rows }] });
      const logits = out.logits[0]!;
      const stride = logits.length / count;
      for (let i = 0; i < count; i++) {
        const target = start + i + 1;
        if (target >= ids.length) break;
        const { nll, top1 } = tokenNll(logits.subarray(i * stride, i * stride + vocab), ids[target]!);
        sums.tokens++;
        sums.nll += nll;
        if (target >= answerStart) {
          sums.answerTokens++;
          sums.answerNll += nll;
          if (top1) sums.answerTop1++;
          else answerExact = false;
        }
      }
    }
  } finally {
    await runner.free(table);
  }
  if (answerStart < ids.length) {
    sums.answers = 1;
    sums.exactAnswers = answerExact ? 1 : 0;
  }
  return sums;
}

const ratioOr = (numerator: number, denominator: number) => (denominator > 0 ? numerator / denominator : Number.NaN);

/** Every document's sums, in total and per group. */
export async function perplexity(runner: RunnerProcess, documents: readonly PerplexityDocument[], options: { chunk?: number; onDocument?: (done: number, total: number) => void } = {}): Promise<PerplexityResult> {
  const total = emptySums();
  const groups = new Map<string, { sums: NllSums; documents: number }>();
  for (const [i, document] of documents.entries()) {
    const sums = await documentNll(runner, document, options.chunk);
    addSums(total, sums);
    const group = groups.get(document.group) ?? { sums: emptySums(), documents: 0 };
    addSums(group.sums, sums);
    group.documents++;
    groups.set(document.group, group);
    options.onDocument?.(i + 1, documents.length);
  }
  const meanNll = ratioOr(total.nll, total.tokens);
  const answerMeanNll = ratioOr(total.answerNll, total.answerTokens);
  return {
    ...total,
    documents: documents.length,
    meanNll,
    perplexity: Math.exp(meanNll),
    answerMeanNll,
    answerPerplexity: Math.exp(answerMeanNll),
    groups: Object.fromEntries(
      [...groups].map(([name, { sums, documents: count }]) => {
        const mean = ratioOr(sums.nll, sums.tokens);
        return [name, { ...sums, documents: count, meanNll: mean, perplexity: Math.exp(mean) }];
      }),
    ),
  };
}

/** The training script's held-out examples (eval_sets()): `count` per family, `retrievalCount` of retrieval. */
export function heldOutExamples(count: number, retrievalCount = count, retrievalBytes = DEFAULT_RETRIEVAL_BYTES, families: readonly QualityFamily[] = QUALITY_FAMILIES): QualityExample[] {
  const examples: QualityExample[] = [];
  for (const family of families) {
    const f = QUALITY_FAMILIES.indexOf(family);
    const n = family === "retrieval" ? retrievalCount : count;
    for (let i = 0; i < n; i++) {
      const seed = exampleSeed(QUALITY_EVAL_SEED + f, i);
      if (family === "order") examples.push(qualityExample(family, seed, { order: i % 2 === 0 ? "original" : "annotated", dedup: Math.floor(i / 2) % 2 === 1 }));
      else if (family === "retrieval") examples.push(qualityExample(family, seed, { retrievalBytes }));
      else examples.push(qualityExample(family, seed));
    }
  }
  return examples;
}

/** An example as a document: `<s> prompt answer "\n"`, the answer and its end scored apart. */
export function exampleDocument(tokenizer: ModelTokenizer, addBos: boolean, example: QualityExample): PerplexityDocument {
  const prompt = completionIds(tokenizer, addBos, example.prompt);
  const ids = completionIds(tokenizer, addBos, example.prompt + example.answer + ANSWER_END);
  const aligned = prompt.length < ids.length && prompt.every((id, i) => ids[i] === id);
  return { group: example.family, ids, ...(aligned ? { answerStart: prompt.length } : {}) };
}

/** A text as documents of at most `window` tokens (BOS first in each when `addBos`), the first token of each only context. */
export function textWindows(tokenizer: ModelTokenizer, addBos: boolean, text: string, window: number): PerplexityDocument[] {
  const ids = tokenizer.promptIds(text);
  const bos = addBos ? tokenizer.bosTokenId : null;
  const body = bos === null ? window : window - 1;
  if (body < 1) throw new Error(`a window of ${window} tokens holds no text`);
  const documents: PerplexityDocument[] = [];
  for (let start = 0; start < ids.length; start += body) {
    const piece = ids.slice(start, start + body);
    documents.push({ group: "text", ids: bos === null ? piece : [bos, ...piece] });
  }
  return documents;
}
