/**
 * What sparse decode ranks pages against (the query anchor of CHESS's eq. 4).
 *
 * - "window": the mean page vector of the local window minus the mean of all page vectors (the
 *   default before; see sparsePageSelection.ts's `centered`).
 * - "newest": the keys (RoPE removed) of the newest `tokens` written tokens, averaged per layer,
 *   uncentered. At the first selection those are the prompt's last tokens, i.e. the question;
 *   the window's pages dilute them with the filler around them (BENCHMARKS.md, issue 31 item 6).
 * - "newest-centered": the same minus the mean page vector.
 *
 * The page vectors are layer-major (layer 0's kv_width values, then layer 1's, ...), the layout
 * of the runner's KEY_SUMMARY; an anchor has the same layout, so its dot product with a page
 * vector sums the per-layer, per-head key-key affinities.
 */
import type { TokenRefinementOptions } from "./sparseTokenRefinement.ts";

export const SPARSE_ANCHORS = ["window", "newest", "newest-centered"] as const;
export type SparseAnchorKind = (typeof SPARSE_ANCHORS)[number];

export const DEFAULT_SPARSE_ANCHOR: SparseAnchorKind = "newest";
export const DEFAULT_ANCHOR_TOKENS = 1;
/** More newest tokens than this are not the question any more but the filler before it. */
export const MAX_ANCHOR_TOKENS = 64;

export interface SparseAnchorOptions {
  kind: SparseAnchorKind;
  /** Newest tokens averaged ("newest" kinds), 1..MAX_ANCHOR_TOKENS. */
  tokens: number;
  /** The fine stage, pages re-ranked by their best token (default DEFAULT_TOKEN_REFINEMENT; factor 0: off). */
  refinement?: TokenRefinementOptions;
}

export const DEFAULT_SPARSE_ANCHOR_OPTIONS: Readonly<SparseAnchorOptions> = Object.freeze({ kind: DEFAULT_SPARSE_ANCHOR, tokens: DEFAULT_ANCHOR_TOKENS });

/** Whether the kind needs the newest tokens' keys (an EXPORT at selection time). */
export function usesNewestKeys(kind: SparseAnchorKind): boolean {
  return kind !== "window";
}

/** Whether selection subtracts the mean page vector from the anchor. */
export function anchorCentered(kind: SparseAnchorKind): boolean {
  return kind !== "newest";
}

/**
 * The mean over `count` tokens of each layer's keys, layer-major: `layers[l]` holds count rows of
 * kvWidth floats (the runner's EXPORT layout of K). Throws on a row count that does not match.
 */
export function newestKeysAnchor(layers: readonly { k: ArrayLike<number> }[], count: number, kvWidth: number): Float32Array {
  if (!Number.isInteger(count) || count < 1) throw new RangeError(`newestKeysAnchor: count must be an integer >= 1 (got ${count})`);
  if (!Number.isInteger(kvWidth) || kvWidth < 1) throw new RangeError(`newestKeysAnchor: kvWidth must be an integer >= 1 (got ${kvWidth})`);
  const anchor = new Float32Array(layers.length * kvWidth);
  layers.forEach(({ k }, layer) => {
    if (k.length !== count * kvWidth) throw new RangeError(`newestKeysAnchor: layer ${layer} holds ${k.length} floats, not ${count} × ${kvWidth}`);
    for (let i = 0; i < kvWidth; i++) {
      let sum = 0;
      for (let t = 0; t < count; t++) sum += k[t * kvWidth + i]!;
      anchor[layer * kvWidth + i] = sum / count;
    }
  });
  return anchor;
}
