/**
 * One step of the scheduler: each running sequence's share of it (the tokens it runs), the tables
 * that must hold them, and whether its logits can come back as greedy rows.
 */
import type { ForwardSequence } from "../runner/runnerProtocol.ts";
import type { GrowRequest } from "../kv/kvBlockTable.ts";
import type { Sequence } from "./sequence.ts";
import { takesGreedyRow } from "./tokenOutput.ts";

/** One sequence's share of a step: the tokens it runs, and whether it is a decode (one token, logits of row 0). */
export interface StepRun {
  sequence: Sequence;
  count: number;
  decode: boolean;
}

/** The tables of a step's runs, each to hold its entries after the step. */
export function growRequests(plan: readonly StepRun[]): GrowRequest[] {
  return plan.map((p) => ({ table: p.sequence.table, entries: p.sequence.table.length + p.count }));
}

/**
 * Whether the step's logits can come back as greedy rows (argmax only: 8 bytes a row instead of
 * 600 KB-1 MB at the vocabularies of Qwen3, Phi-3/4 and Gemma 3): every sequence that samples
 * this step takes one row and needs nothing but its argmax.
 */
export function greedyRowsSuffice(plan: readonly StepRun[], sequences: readonly ForwardSequence[]): boolean {
  let sampling = false;
  for (let i = 0; i < plan.length; i++) {
    const rows = sequences[i]!.logitRows.length;
    if (rows === 0) continue;
    if (rows > 1 || !takesGreedyRow(plan[i]!.sequence)) return false;
    sampling = true;
  }
  return sampling;
}
