/**
 * A step's FORWARD sequences: the tokens each run writes, where, and the logit rows it wants.
 * A sparse decode step reads its compacted table (the selected pages of the full group); on a model
 * with sliding-window layers (two KV groups) the sliding group keeps its true window: the whole
 * sliding table and the token's true sequence index there (`slidingIndices`).
 */
import type { SlidingWindowGroup } from "../kv/slidingWindowGroup.ts";
import type { ForwardSequence } from "../runner/runnerProtocol.ts";
import type { StepRun } from "./stepRun.ts";
import { wantsPromptRows } from "./tokenOutput.ts";

export function stepForwardSequences(plan: readonly StepRun[], sliding: SlidingWindowGroup | null): ForwardSequence[] {
  return plan.map(({ sequence, count, decode }) => {
    const start = sequence.table.length;
    const slidingTable = sliding === null ? {} : { slidingTable: sliding.tableOf(sequence.table).blocks };
    if (decode && sequence.sparse !== null) {
      const entry = sequence.sparse.decodeEntry(sequence.table.blocks, start);
      const forward: ForwardSequence = { table: entry.table, ...slidingTable, tokens: [sequence.tokens[start]!], positions: [start], indices: [entry.index], logitRows: [0] };
      if (sliding !== null && entry.index !== start) forward.slidingIndices = [start];
      return forward;
    }
    const indices = new Uint32Array(count);
    for (let i = 0; i < count; i++) indices[i] = start + i;
    const last = start + count === sequence.tokens.length;
    const logitRows = wantsPromptRows(sequence, start) ? Array.from({ length: count }, (_, row) => row) : last ? [count - 1] : [];
    return { table: sequence.table.blocks, ...slidingTable, tokens: sequence.tokens.slice(start, start + count), indices, logitRows };
  });
}
