/**
 * The sliding-window KV group of a KV-managed prefill (managedPrefill.ts) on a model with two KV
 * cache groups, held to what a prefill chunk holds: the window, one block, and the span of one
 * FORWARD (`span` entries). The prefill's FORWARDs go through forward(), which runs each as parts
 * in index order whose indices lie within `span` of each other; before a part:
 *
 * - the sequence's own sliding blocks outside the part's window and indices are freed (before it,
 *   or past it after an earlier pass) — the entries this prefill computed in them are first saved
 *   (EXPORT of the sliding layers), since a later pass (ProphetKV's stage II, the store-back) may
 *   need them again;
 * - blocks are allocated for the part's window and indices, and the entries of its window that
 *   the sliding group does not hold are written back (IMPORT of the sliding layers): a reused
 *   chunk's from its cached K/V (addSource), a computed one's from what was saved.
 *
 * The global layers' K/V is placed whole by the caller (IMPORT of the global layers), as the global
 * layers read every entry. Entries before `fixedBefore` (a prefix-cache hit: its window checkpoint
 * is shared) are never freed or written. The parts' results merge into one (forwardResultMerge.ts),
 * so statistics read as from one FORWARD; focused-chunk early stop needs one part (fitsOnePart).
 */
import type { ForwardRequest, ForwardResult, ForwardSequence, KvData, KvRange, LayerKv, RunnerInfo } from "../runner/runnerProtocol.ts";
import { kvWidth } from "../runner/runnerProtocol.ts";
import { mergeForwardParts } from "./forwardResultMerge.ts";
import { NO_BLOCK } from "./kvBlockTable.ts";

export interface SlidingWindowRunner {
  readonly info: RunnerInfo;
  forward(request: ForwardRequest): Promise<ForwardResult>;
  export(range: KvRange): Promise<KvData>;
  import(range: KvRange, data: KvData): Promise<void>;
}

/** The sliding group's block pool (the scheduler's SlidingWindowGroup). */
export interface SlidingBlockSource {
  alloc(count: number): Promise<number[]>;
  free(ids: readonly number[]): Promise<void>;
}

export interface SlidingPrefillSettings {
  /** The sequence's sliding table: changed in place (blocks freed become NO_BLOCK). */
  table: number[];
  blocks: SlidingBlockSource;
  /** The sliding layers' window. */
  window: number;
  /** Most entries one FORWARD part's indices span (the scheduler's prefill chunk). */
  span: number;
}

export class SlidingPrefillWindow {
  readonly table: number[];
  private readonly blockSize: number;
  private readonly width: number;
  private readonly slidingLayers: number[];
  /** Whether the sliding group holds index i's current K/V. */
  private readonly held: Uint8Array;
  /** Whether a FORWARD of this prefill wrote index i (its K/V is not a cached chunk's). */
  private readonly written: Uint8Array;
  /** Saved sliding-layer K/V of written entries whose blocks were freed: per sliding layer [k, v] rows. */
  private readonly saved = new Map<number, Float32Array[]>();
  /** Cached chunks' K/V (all layers), by their first sequence index. */
  private readonly sources: { start: number; data: KvData }[] = [];

  constructor(
    private readonly runner: SlidingWindowRunner,
    private readonly fullTable: readonly number[],
    private readonly settings: SlidingPrefillSettings,
    /** Entries before this one are a prefix-cache hit's: left as they are. */
    private readonly fixedBefore: number,
    length: number,
  ) {
    const info = runner.info;
    if (info.kv_groups === undefined) throw new Error("SlidingPrefillWindow: the runner has one KV group");
    if (!(Number.isSafeInteger(settings.span) && settings.span >= 1)) throw new RangeError(`SlidingPrefillWindow: span must be a positive integer, got ${settings.span}`);
    this.table = settings.table;
    this.blockSize = info.block_size;
    this.width = kvWidth(info);
    this.slidingLayers = info.kv_groups[1]!.layers;
    this.held = new Uint8Array(length);
    this.written = new Uint8Array(length);
    for (let i = 0; i < Math.min(fixedBefore, length); i++) this.held[i] = 1;
  }

  /** A cached chunk placed at `start` (its global layers written by the caller): its sliding layers are written from `data` when a window needs them. */
  addSource(start: number, data: KvData): void {
    this.sources.push({ start, data });
  }

  /** Whether `indices` (ascending) run as one part, as focused-chunk early stop needs. */
  fitsOnePart(indices: ArrayLike<number>): boolean {
    return indices.length === 0 || indices[indices.length - 1]! - indices[0]! < this.settings.span;
  }

  /** Runs a one-sequence FORWARD (indices ascending) as parts within the span, the window held for each. */
  async forward(request: ForwardRequest): Promise<ForwardResult> {
    if (request.sequences.length !== 1) throw new RangeError("SlidingPrefillWindow.forward: one sequence");
    const seq = request.sequences[0]!;
    const parts = this.partition(seq.indices);
    if (parts.length > 1 && request.earlyStop) throw new RangeError("SlidingPrefillWindow.forward: early stop needs one part (fitsOnePart)");
    const results: ForwardResult[] = [];
    for (const [from, to] of parts) {
      const part = partOf(seq, from, to);
      await this.hold(part.indices);
      results.push(await this.runner.forward({ ...request, sequences: [{ ...part, table: this.fullTable, slidingTable: this.table }] }));
      for (let i = 0; i < part.indices.length; i++) {
        this.held[part.indices[i]!] = 1;
        this.written[part.indices[i]!] = 1;
        this.saved.delete(part.indices[i]!);
      }
    }
    return mergeForwardParts(results);
  }

  /** Every layer's K/V of entries start.. (a computed chunk, for the cache), its sliding layers from the group or as saved. */
  async kvOf(start: number, count: number): Promise<KvData> {
    const global = await this.runner.export({ table: this.fullTable, slidingTable: this.table, start, count, groups: 1 });
    for (const [from, to] of runs(start, start + count, (i) => this.held[i] === 1)) {
      const part = await this.runner.export({ table: this.fullTable, slidingTable: this.table, start: from, count: to - from, groups: 2 });
      for (const l of this.slidingLayers) {
        global.layers[l]!.k.set(part.layers[l]!.k, (from - start) * this.width);
        global.layers[l]!.v.set(part.layers[l]!.v, (from - start) * this.width);
      }
    }
    for (let i = start; i < start + count; i++) {
      if (this.held[i] === 1) continue;
      const rows = this.saved.get(i);
      if (rows === undefined) throw new Error(`SlidingPrefillWindow: the sliding layers' K/V of index ${i} was neither kept nor saved`);
      this.slidingLayers.forEach((l, s) => {
        global.layers[l]!.k.set(rows[2 * s]!, (i - start) * this.width);
        global.layers[l]!.v.set(rows[2 * s + 1]!, (i - start) * this.width);
      });
    }
    return global;
  }

  /** Index ranges [from, to) of `indices` (ascending) whose members lie within the span. */
  private partition(indices: ArrayLike<number>): [number, number][] {
    const parts: [number, number][] = [];
    let from = 0;
    for (let i = 1; i <= indices.length; i++) {
      if (i === indices.length || indices[i]! - indices[from]! >= this.settings.span) {
        parts.push([from, i]);
        from = i;
      }
    }
    return parts;
  }

  /** Frees the blocks before the part's window, allocates its blocks, writes back what its window lacks. */
  private async hold(indices: ArrayLike<number>): Promise<void> {
    if (indices.length === 0) return;
    const bs = this.blockSize;
    const lowest = indices[0]!;
    const highest = indices[indices.length - 1]!;
    const windowStart = Math.max(0, lowest + 1 - this.settings.window);
    const firstOwn = Math.ceil(this.fixedBefore / bs);
    const firstBlock = Math.max(firstOwn, Math.floor(windowStart / bs));
    const lastBlock = Math.floor(highest / bs);
    // Free the own blocks outside the window and the part (wholly before it, or past it after an
    // earlier pass), saving this prefill's entries there first.
    const gone: number[] = [];
    for (let b = firstOwn; b < this.table.length; b++) {
      if (this.table[b] === NO_BLOCK || (b >= firstBlock && b <= lastBlock)) continue;
      await this.save(b * bs, Math.min((b + 1) * bs, this.held.length));
      gone.push(this.table[b]!);
      this.table[b] = NO_BLOCK;
      this.held.fill(0, b * bs, (b + 1) * bs);
    }
    if (gone.length > 0) await this.settings.blocks.free(gone);
    // Blocks for the window and the part.
    const missing: number[] = [];
    for (let b = firstBlock; b <= lastBlock; b++) if (b >= this.table.length || this.table[b] === NO_BLOCK) missing.push(b);
    if (missing.length > 0) {
      const ids = await this.settings.blocks.alloc(missing.length);
      while (this.table.length <= lastBlock) this.table.push(NO_BLOCK);
      missing.forEach((b, k) => (this.table[b] = ids[k]!));
    }
    // Write back the window's entries the group lacks (the part's own are written by its FORWARD).
    const inPart = new Set<number>(Array.from(indices));
    for (const [from, to] of runs(Math.max(windowStart, this.fixedBefore), highest + 1, (i) => this.held[i] === 0 && !inPart.has(i))) await this.restore(from, to);
  }

  /** Saves the sliding layers' K/V of the entries in [from, to) this prefill wrote and the group still holds. */
  private async save(from: number, to: number): Promise<void> {
    for (const [a, b] of runs(from, to, (i) => this.held[i] === 1 && this.written[i] === 1)) {
      const data = await this.runner.export({ table: this.fullTable, slidingTable: this.table, start: a, count: b - a, groups: 2 });
      for (let i = a; i < b; i++) {
        const offset = (i - a) * this.width;
        this.saved.set(
          i,
          this.slidingLayers.flatMap((l) => [data.layers[l]!.k.slice(offset, offset + this.width), data.layers[l]!.v.slice(offset, offset + this.width)]),
        );
      }
    }
  }

  /** Writes the sliding layers of entries [from, to) from what was saved or the cached chunk that holds them. */
  private async restore(from: number, to: number): Promise<void> {
    const count = to - from;
    const layers: LayerKv[] = Array.from({ length: this.runner.info.layers }, () => ({ k: new Float32Array(count * this.width), v: new Float32Array(count * this.width) }));
    const positions = new Int32Array(count);
    for (let i = from; i < to; i++) {
      const at = (i - from) * this.width;
      positions[i - from] = i;
      const rows = this.written[i] === 1 ? this.saved.get(i) : undefined;
      if (rows !== undefined) {
        this.slidingLayers.forEach((l, s) => {
          layers[l]!.k.set(rows[2 * s]!, at);
          layers[l]!.v.set(rows[2 * s + 1]!, at);
        });
        continue;
      }
      const source = this.written[i] === 1 ? undefined : this.sources.find((s) => i >= s.start && i < s.start + s.data.positions.length);
      if (source === undefined) throw new Error(`SlidingPrefillWindow: index ${i} is in a window but neither computed nor placed`);
      const offset = (i - source.start) * this.width;
      for (const l of this.slidingLayers) {
        layers[l]!.k.set(source.data.layers[l]!.k.subarray(offset, offset + this.width), at);
        layers[l]!.v.set(source.data.layers[l]!.v.subarray(offset, offset + this.width), at);
      }
    }
    await this.runner.import({ table: this.fullTable, slidingTable: this.table, start: from, count, groups: 2 }, { positions, layers });
    this.held.fill(1, from, to);
  }
}

/** Maximal runs [a, b) within [from, to) where `keep` holds. */
function runs(from: number, to: number, keep: (i: number) => boolean): [number, number][] {
  const out: [number, number][] = [];
  let start = -1;
  for (let i = from; i <= to; i++) {
    const inside = i < to && keep(i);
    if (inside && start < 0) start = i;
    else if (!inside && start >= 0) {
      out.push([start, i]);
      start = -1;
    }
  }
  return out;
}

/** Rows [from, to) of a FORWARD sequence as a sequence of their own (logit and query rows renumbered, chunk bounds cut at its length). */
function partOf(seq: ForwardSequence, from: number, to: number): ForwardSequence & { indices: ArrayLike<number> } {
  const pick = <T extends ArrayLike<number>>(rows: T | undefined): number[] | undefined => {
    if (rows === undefined) return undefined;
    const out: number[] = [];
    let previous = -1;
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!;
      if (row < previous) throw new RangeError("SlidingPrefillWindow.forward: logit and query rows must ascend");
      previous = row;
      if (row >= from && row < to) out.push(row - from);
    }
    return out;
  };
  const slice = (values: ArrayLike<number>) => Array.from({ length: to - from }, (_, i) => values[from + i]!);
  const indices = Uint32Array.from(slice(seq.indices));
  const part: ForwardSequence & { indices: Uint32Array } = { table: seq.table, tokens: slice(seq.tokens), indices, logitRows: pick(seq.logitRows)! };
  if (seq.positions !== undefined) part.positions = slice(seq.positions);
  const queryRows = pick(seq.queryRows);
  if (queryRows !== undefined) part.queryRows = queryRows;
  if (seq.chunkBounds !== undefined) {
    const len = indices[indices.length - 1]! + 1;
    const bounds = Array.from(seq.chunkBounds).filter((b) => b <= len);
    if (bounds.length < seq.chunkBounds.length && bounds.at(-1)! < len) bounds.push(len);
    part.chunkBounds = bounds;
  }
  if (seq.earlyStop !== undefined) part.earlyStop = seq.earlyStop;
  return part;
}
