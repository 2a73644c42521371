/**
 * The data the kernels take and give, shared by the kernel interface (indexKernels.ts), the
 * argument checks (validate.ts) and both implementations.
 */

/**
 * A batch of contexts: context i is flat[offsets[i] .. offsets[i+1]), its dense block numbers
 * 0..blockCount-1, distinct within a context, in original order (position = index within the
 * context, 0-based). offsets has (number of contexts + 1) entries and starts at 0.
 */
export interface EncodedContexts {
  readonly flat: Int32Array;
  readonly offsets: Int32Array;
  readonly blockCount: number;
}

export type LinkageMethod = "average" | "single" | "complete";
export const LINKAGE_METHODS: readonly LinkageMethod[] = ["average", "single", "complete"];

/** Position weight of the context distance (ContextPilot eq. 1) when none is given. */
export const DEFAULT_ALPHA = 0.001;

/** Selected indices of every row, concatenated: row r is indices[offsets[r] .. offsets[r+1]). */
export interface TopPRows {
  readonly indices: Uint32Array;
  readonly offsets: Uint32Array;
}
