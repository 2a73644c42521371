/**
 * The fine stage of sparse decode's page selection: after pages are ranked by their mean key
 * (KEY_SUMMARY), the tokens of the best `factor × budget` of them are scored one by one
 * (KEY_SCORES) and pages are ranked again by their best token.
 *
 * A mean ranks a page by what most of its tokens hold; the answer to a lookup is usually one
 * token that matches the query followed by the few tokens that answer it. When that match sits
 * in the last slots of a page, the answer is on the next page, which holds nothing that matches
 * (on the quality model's retrieval prompts, 8 of 9 pages missed at a 10% budget were such
 * records: BENCHMARKS.md, issue 31 item 6). So a page also inherits the best score among the
 * last `lookback` tokens of the page before it, and each coarse candidate's successor is scored
 * too.
 */

/** Coarse candidates as a multiple of the page budget; 0 turns the fine stage off. */
export const DEFAULT_REFINE_FACTOR = 4;
/** Tokens at the end of a page whose match also ranks the next page (a record's answer after its key). */
export const DEFAULT_REFINE_LOOKBACK = 4;
export const MAX_REFINE_FACTOR = 64;
/** Beyond a block's size the lookback is the whole previous block. */
export const MAX_REFINE_LOOKBACK = 64;

export interface TokenRefinementOptions {
  /** Coarse candidates = factor × page budget (0: off). */
  factor: number;
  /** Tokens, 0..MAX_REFINE_LOOKBACK (a planner uses at most its block size). */
  lookback: number;
}

export const DEFAULT_TOKEN_REFINEMENT: Readonly<TokenRefinementOptions> = Object.freeze({ factor: DEFAULT_REFINE_FACTOR, lookback: DEFAULT_REFINE_LOOKBACK });

/** How many coarse candidates the fine stage scores for a budget of `pageBudget` pages. */
export function coarseCandidateCount(pageBudget: number, factor: number): number {
  return factor <= 0 ? 0 : pageBudget * factor;
}

/**
 * Pages whose tokens get scored: the coarse candidates and, where it is a candidate too, each
 * one's successor (its answer may start there); sorted, without duplicates.
 */
export function pagesToScore(coarse: readonly number[], isCandidate: (page: number) => boolean): number[] {
  const pages = new Set<number>();
  for (const page of coarse) {
    pages.add(page);
    if (isCandidate(page + 1)) pages.add(page + 1);
  }
  return [...pages].sort((a, b) => a - b);
}

/**
 * Each scored page's score: the best of its own token scores and of the last `lookback` token
 * scores of the page before it when that page was scored too. `tokenScores` holds blockSize
 * scores per page of `pages`, in that order (-Infinity for a slot not written).
 */
export function refinedPageScores(pages: readonly number[], tokenScores: ArrayLike<number>, blockSize: number, lookback: number): Map<number, number> {
  if (tokenScores.length !== pages.length * blockSize) {
    throw new RangeError(`refinedPageScores: ${tokenScores.length} token scores for ${pages.length} pages of ${blockSize}`);
  }
  if (!Number.isInteger(lookback) || lookback < 0 || lookback > blockSize) throw new RangeError(`refinedPageScores: lookback must be an integer in 0..${blockSize} (got ${lookback})`);
  const own = new Map<number, number>();
  const tail = new Map<number, number>();
  pages.forEach((page, i) => {
    let best = -Infinity;
    let bestTail = -Infinity;
    for (let o = 0; o < blockSize; o++) {
      const score = tokenScores[i * blockSize + o]!;
      if (score > best) best = score;
      if (o >= blockSize - lookback && score > bestTail) bestTail = score;
    }
    own.set(page, best);
    tail.set(page, bestTail);
  });
  const scores = new Map<number, number>();
  for (const page of pages) scores.set(page, Math.max(own.get(page)!, tail.get(page - 1) ?? -Infinity));
  return scores;
}

/** The `count` pages of `scores` with the highest score (ties to the lower page), sorted. */
export function topScoredPages(scores: ReadonlyMap<number, number>, count: number): number[] {
  const ranked = [...scores].sort((a, b) => b[1] - a[1] || a[0] - b[0]);
  return ranked.slice(0, Math.max(0, count)).map(([page]) => page).sort((a, b) => a - b);
}
