/**
 * Which blocks of a sliding-window layer group a sequence needs (pure). Entry `s` of a sequence
 * attends to entries s+1−window .. s in a sliding layer, so a resume at a block boundary P (the
 * prefix cache's unit) needs the blocks covering P+1−window .. P−1, and a running sequence of
 * `length` written entries keeps those of its last block boundary: blocks before them are never
 * read again (by it, or by a later request resuming from its checkpoint).
 */

/** The first block the token at sequence index `index` reads in a sliding layer. */
export function windowStartBlock(index: number, window: number, blockSize: number): number {
  return Math.floor(Math.max(0, index + 1 - window) / blockSize);
}

/**
 * The first block a sequence with `length` written entries still needs: the window before its
 * last full-block boundary (what its next tokens read, and what a checkpoint there needs). At
 * most ceil(window / blockSize) + 1 blocks from there on hold its written entries.
 */
export function firstLiveBlock(length: number, window: number, blockSize: number): number {
  return windowStartBlock(Math.floor(length / blockSize) * blockSize, window, blockSize);
}

/** The blocks a resume after `blocks` full blocks needs from the sliding group: [first, blocks). */
export function checkpointSpan(blocks: number, window: number, blockSize: number): { first: number; end: number } {
  return { first: blocks === 0 ? 0 : windowStartBlock(blocks * blockSize, window, blockSize), end: blocks };
}

/**
 * The longest resume, in full blocks, at most `fullRun` (the full-attention group's cached run),
 * whose sliding-window span is cached too (`hasCheckpoint(i)`: block i's sliding KV is cached).
 * 0 when none is.
 */
export function longestSlidingResume(fullRun: number, hasCheckpoint: (block: number) => boolean, window: number, blockSize: number): number {
  for (let blocks = fullRun; blocks > 0; blocks--) {
    const { first, end } = checkpointSpan(blocks, window, blockSize);
    let complete = true;
    for (let i = end - 1; i >= first && complete; i--) complete = hasCheckpoint(i);
    if (complete) return blocks;
  }
  return 0;
}
