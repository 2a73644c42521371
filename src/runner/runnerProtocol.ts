/**
 * The binary protocol between the server and the native model runner
 * (cuda/PROTOCOL.md): length-prefixed frames over the runner's stdin/stdout,
 * little-endian. Pure encoding and decoding of frames and op bodies, and an
 * incremental reader that cuts stdout chunks into response frames. No I/O here
 * (runnerProcess.ts does that).
 *
 * Request frame:  u32 length, u32 op, u32 id, body
 * Response frame: u32 length, u32 id, u32 status, body
 */

export * from "./runnerFrames.ts";
import { BodyReader, BodyWriter, ProtocolError, decodeText } from "./runnerFrames.ts";

// ---------------------------------------------------------------------------
// INFO

export interface RunnerInfo {
  layers: number;
  hidden: number;
  heads: number;
  kv_heads: number;
  head_dim: number;
  vocab: number;
  block_size: number;
  num_blocks: number;
  free_blocks: number;
  device: string;
  weight_dtype: string;
  kv_dtype: string;
  max_position_embeddings: number;
  architecture: string;
  build: string;
  /** Per layer, the sliding-window length (0: global attention); absent from older runners. */
  layer_windows?: number[];
  /**
   * A model with both global and sliding-window layers: its two KV cache groups (group 0 the
   * full-attention layers, group 1 the sliding-window ones), each with its own block pool and a
   * block table per sequence. Absent with one group (num_blocks/free_blocks are then the only pool).
   */
  kv_groups?: KvGroupInfo[];
}

export interface KvGroupInfo {
  kind: "full_attention" | "sliding_window";
  /** The group's window (sliding_window only). */
  sliding_window?: number;
  layers: number[];
  num_blocks: number;
  free_blocks: number;
}

/** The sliding-window group of a runner with two KV groups, or null. */
export function slidingGroupOf(info: Pick<RunnerInfo, "kv_groups">): (KvGroupInfo & { sliding_window: number }) | null {
  const group = info.kv_groups?.[1];
  return group === undefined ? null : (group as KvGroupInfo & { sliding_window: number });
}


function checkKvGroups(groups: unknown, layers: number): void {
  const fail = (why: string): never => {
    throw new ProtocolError(`INFO: kv_groups ${why}, got ${JSON.stringify(groups)}`);
  };
  if (!Array.isArray(groups) || groups.length !== 2) fail("must be two groups (full_attention, sliding_window)");
  const [full, sliding] = groups as Record<string, unknown>[];
  if (full?.kind !== "full_attention" || sliding?.kind !== "sliding_window") fail("must be a full_attention group then a sliding_window group");
  const isCount = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
  const seen = new Set<number>();
  for (const group of [full!, sliding!]) {
    if (!isCount(group.num_blocks) || !isCount(group.free_blocks) || !Array.isArray(group.layers)) fail("need num_blocks, free_blocks and layers");
    for (const layer of group.layers as unknown[]) {
      if (!isCount(layer) || (layer as number) >= layers || seen.has(layer as number)) fail(`must list each of the ${layers} layers once`);
      seen.add(layer as number);
    }
  }
  if (seen.size !== layers) fail(`must list each of the ${layers} layers once`);
  if (!(isCount(sliding!.sliding_window) && (sliding!.sliding_window as number) > 0)) fail("need a positive sliding_window for the sliding group");
}

const INFO_INTEGERS = ["layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "block_size", "num_blocks", "free_blocks", "max_position_embeddings"] as const;
const INFO_STRINGS = ["device", "weight_dtype", "kv_dtype", "architecture", "build"] as const;

/** INFO's JSON body, checked for the fields the server relies on (unknown extra fields are kept). */
export function decodeInfo(body: Uint8Array): RunnerInfo {
  let value: unknown;
  try {
    value = JSON.parse(decodeText(body));
  } catch (error) {
    throw new ProtocolError(`INFO: body is not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new ProtocolError("INFO: body is not a JSON object");
  const info = value as Record<string, unknown>;
  for (const key of INFO_INTEGERS) {
    const field = info[key];
    if (typeof field !== "number" || !Number.isSafeInteger(field) || field < 0) throw new ProtocolError(`INFO: ${key} must be a non-negative integer, got ${JSON.stringify(field)}`);
  }
  for (const key of INFO_STRINGS) {
    if (info[key] === undefined) info[key] = "";
    else if (typeof info[key] !== "string") throw new ProtocolError(`INFO: ${key} must be a string, got ${JSON.stringify(info[key])}`);
  }
  const windows = info.layer_windows;
  if (windows !== undefined) {
    const layers = info.layers as number;
    if (!Array.isArray(windows) || windows.length !== layers || !windows.every((w) => typeof w === "number" && Number.isSafeInteger(w) && w >= 0))
      throw new ProtocolError(`INFO: layer_windows must be ${layers} non-negative integers (one per layer), got ${JSON.stringify(windows)}`);
  }
  if (info.kv_groups !== undefined) checkKvGroups(info.kv_groups, info.layers as number);
  return info as unknown as RunnerInfo;
}

export function kvWidth(info: Pick<RunnerInfo, "kv_heads" | "head_dim">): number {
  return info.kv_heads * info.head_dim;
}

// ---------------------------------------------------------------------------
// ALLOC, FREE, COPY, MOVE

/** ALLOC of `count` blocks of KV group `group` (0 is sent as today's one-field body). */
export function encodeAlloc(count: number, group = 0): Uint8Array {
  return group === 0 ? new BodyWriter(4).u32(count).finish() : new BodyWriter(8).u32(count).u32(group).finish();
}

export function decodeAllocResponse(body: Uint8Array, requested?: number): number[] {
  const reader = new BodyReader(body, "ALLOC response");
  const n = reader.u32("n");
  if (requested !== undefined && n !== requested) throw new ProtocolError(`ALLOC response: ${n} blocks for a request of ${requested}`);
  const ids = Array.from(reader.u32s(n, "ids"));
  reader.end();
  return ids;
}

export function encodeFree(ids: readonly number[], group = 0): Uint8Array {
  const writer = new BodyWriter((group === 0 ? 4 : 8) + 4 * ids.length).u32(ids.length).u32s(ids);
  if (group !== 0) writer.u32(group);
  return writer.finish();
}

export interface BlockPair {
  src: number;
  dst: number;
}

/** The body of COPY and of MOVE. */
export function encodeBlockPairs(pairs: readonly BlockPair[]): Uint8Array {
  const writer = new BodyWriter(4 + 8 * pairs.length).u32(pairs.length);
  for (const pair of pairs) writer.u32(pair.src).u32(pair.dst);
  return writer.finish();
}

// ---------------------------------------------------------------------------
// FORWARD

export interface ForwardSequence {
  /** The sequence's block table. */
  table: readonly number[];
  /**
   * On a runner with two KV groups (RunnerInfo.kv_groups), required: the sequence's block table of
   * the sliding-window group, indexed like `table`, NO_BLOCK where a block has left the window.
   */
  slidingTable?: readonly number[];
  /** New tokens to run. */
  tokens: ArrayLike<number>;
  /** Their rotary positions (default: their sequence indices). */
  positions?: ArrayLike<number>;
  /** The sequence index each token's K/V is written to. */
  indices: ArrayLike<number>;
  /**
   * Two KV groups only: each token's index in `slidingTable` when `table` is a compacted one
   * (sparse decode: the full group reads selected pages, the sliding group its true window);
   * default `indices`. Any sequence with it sets FORWARD's flags bit 5 (not with stats).
   */
  slidingIndices?: ArrayLike<number>;
  /** Which of the new tokens (0-based) to return logits for. */
  logitRows: ArrayLike<number>;
  /** With statistics: new tokens (0-based) whose attention to record. */
  queryRows?: ArrayLike<number>;
  /** With statistics: chunk boundaries in sequence indices (n_chunks + 1 values, increasing). */
  chunkBounds?: ArrayLike<number>;
  /** With early stop (ForwardRequest.earlyStop, required then): Cache-Craft focused-chunk early stop. */
  earlyStop?: EarlyStopSettings;
}

export interface EarlyStopSettings {
  /** Layers the focused set must stay the same before it is fixed (>= 1). */
  window: number;
  /** The chunk (index into chunkBounds' chunks) holding the question. */
  questionChunk: number;
}

export interface ForwardRequest {
  sequences: readonly ForwardSequence[];
  /** Ask for attention statistics (flags bit 0). */
  stats?: boolean;
  /** With stats: each query's mass summed per chunk, queries × nChunks, instead of per entry (flags bit 1). */
  chunkMass?: boolean;
  /**
   * With stats: focused-chunk early stop (flags bit 2); every sequence needs `earlyStop`. Logit
   * rows must lie in the question chunk or outside every chunk.
   */
  earlyStop?: boolean;
  /**
   * Each logit row comes back as its argmax token and that logit (flags bit 3), not vocab floats:
   * all a greedy step without logprobs, penalties or a grammar needs (ForwardResult.greedy).
   */
  greedyRows?: boolean;
  /**
   * A mixture-of-experts model's chosen experts (flags bit 4; not with earlyStop): per sequence,
   * per layer, each new token's k experts in the router's order (ForwardResult.expertRoutes).
   */
  expertRoutes?: boolean;
}

/** A sequence's greedy rows (ForwardRequest.greedyRows), one entry per logit row. */
export interface GreedyRows {
  /** The argmax token (lowest id among equals, NaN never chosen); -1 when no logit is above -Infinity. */
  tokens: Int32Array;
  logits: Float32Array;
}

export interface AttentionStats {
  /**
   * Queries × len (or queries × nChunks when perChunk): each query row's attention mass on each
   * entry (on each chunk), averaged over heads. Zeros for a query that stopped early.
   */
  mass: Float32Array;
  queries: number;
  /** 1 + the largest sequence index among the new tokens. */
  len: number;
  /** Whether `mass` is per chunk (ForwardRequest.chunkMass). */
  perChunk: boolean;
  /** chunks × chunks: chunk a's total mass on chunk b. */
  chunks: Float32Array;
  nChunks: number;
}

/** A sequence's focused-chunk early stop (ForwardRequest.earlyStop). */
export interface EarlyStopResult {
  /**
   * The layers the stoppable tokens ran through: the unfocused chunks' tokens were left out from
   * layer cutoffLayer (0-based) on. Equals the model's layer count when they never stopped.
   */
  cutoffLayer: number;
  /** Chunk indices, ascending: the focused set F* (every chunk but the question's when none was fixed). */
  focused: number[];
}

export interface ForwardResult {
  /** Per sequence: n_logits × vocab, row-major (empty with greedy rows). */
  logits: Float32Array[];
  /** With ForwardRequest.greedyRows: per sequence. */
  greedy?: GreedyRows[];
  /** With statistics: per sequence, per layer. */
  stats?: AttentionStats[][];
  /** With early stop: per sequence. */
  earlyStop?: EarlyStopResult[];
  /** With ForwardRequest.expertRoutes: per sequence, per layer, tokens × k expert ids. */
  expertRoutes?: { k: number; layers: Uint32Array[] }[];
}

/** Sequence indices start .. start+count-1, as FORWARD's `indices` for a contiguous run. */
export function sequenceRange(start: number, count: number): Uint32Array {
  const out = new Uint32Array(count);
  for (let i = 0; i < count; i++) out[i] = start + i;
  return out;
}

function forwardBodyBytes(request: ForwardRequest): number {
  let bytes = 8;
  const slidingIndices = usesSlidingIndices(request);
  for (const seq of request.sequences) {
    bytes += 4 + 4 * seq.table.length + (seq.slidingTable === undefined ? 0 : 4 + 4 * seq.slidingTable.length) + 4 + (slidingIndices ? 16 : 12) * seq.tokens.length + 4 + 4 * seq.logitRows.length;
  }
  if (request.stats) {
    for (const seq of request.sequences) bytes += 4 + 4 * (seq.queryRows?.length ?? 0) + 4 + 4 * (seq.chunkBounds?.length ?? 1) + (request.earlyStop ? 8 : 0);
  }
  return bytes;
}

function usesSlidingIndices(request: ForwardRequest): boolean {
  return request.sequences.some((seq) => seq.slidingIndices !== undefined);
}

/** FORWARD's flags word: bit 0 statistics, bit 1 chunk mass, bit 2 early stop, bit 3 greedy rows, bit 4 expert routes, bit 5 sliding indices. */
export function forwardFlags(request: ForwardRequest): number {
  if ((request.chunkMass || request.earlyStop) && !request.stats) throw new ProtocolError("FORWARD: chunkMass and earlyStop need stats");
  if (request.expertRoutes && request.earlyStop) throw new ProtocolError("FORWARD: expertRoutes cannot go with earlyStop");
  const slidingIndices = usesSlidingIndices(request);
  if (slidingIndices && request.stats) throw new ProtocolError("FORWARD: slidingIndices cannot go with stats");
  return (
    (request.stats ? 1 : 0) | (request.chunkMass ? 2 : 0) | (request.earlyStop ? 4 : 0) | (request.greedyRows ? 8 : 0) | (request.expertRoutes ? 16 : 0) | (slidingIndices ? 32 : 0)
  );
}

export function encodeForward(request: ForwardRequest): Uint8Array {
  const flags = forwardFlags(request);
  const writer = new BodyWriter(forwardBodyBytes(request));
  writer.u32(flags).u32(request.sequences.length);
  request.sequences.forEach((seq, s) => {
    const n = seq.tokens.length;
    if (seq.indices.length !== n) throw new ProtocolError(`FORWARD: sequence ${s} has ${n} tokens but ${seq.indices.length} indices`);
    if (seq.positions !== undefined && seq.positions.length !== n) throw new ProtocolError(`FORWARD: sequence ${s} has ${n} tokens but ${seq.positions.length} positions`);
    if (seq.slidingIndices !== undefined && seq.slidingIndices.length !== n) throw new ProtocolError(`FORWARD: sequence ${s} has ${n} tokens but ${seq.slidingIndices.length} sliding indices`);
    writer.u32(seq.table.length).u32s(seq.table);
    if (seq.slidingTable !== undefined) writer.u32(seq.slidingTable.length).u32s(seq.slidingTable);
    writer.u32(n).u32s(seq.tokens);
    writer.i32s(seq.positions ?? seq.indices);
    writer.u32s(seq.indices);
    if (flags & 32) writer.u32s(seq.slidingIndices ?? seq.indices);
    writer.u32(seq.logitRows.length).u32s(seq.logitRows);
  });
  if (request.stats) {
    request.sequences.forEach((seq, s) => {
      const queries = seq.queryRows ?? [];
      const bounds = seq.chunkBounds ?? [0];
      if (bounds.length < 1) throw new ProtocolError(`FORWARD: sequence ${s} chunk bounds need at least one value`);
      writer.u32(queries.length).u32s(queries);
      writer.u32(bounds.length - 1).u32s(bounds);
      if (request.earlyStop) {
        if (seq.earlyStop === undefined) throw new ProtocolError(`FORWARD: sequence ${s} needs earlyStop settings (the request asks for early stop)`);
        writer.u32(seq.earlyStop.window).u32(seq.earlyStop.questionChunk);
      }
    });
  }
  return writer.finish();
}

/** 1 + the largest sequence index among a sequence's new tokens (the width of its attention statistics). */
export function statsLength(seq: ForwardSequence): number {
  let max = -1;
  for (let i = 0; i < seq.indices.length; i++) max = Math.max(max, seq.indices[i]!);
  return max + 1;
}

export function decodeForwardResponse(body: Uint8Array, request: ForwardRequest, info: Pick<RunnerInfo, "vocab" | "layers">): ForwardResult {
  const reader = new BodyReader(body, "FORWARD response");
  let greedy: GreedyRows[] | undefined;
  let logits: Float32Array[];
  if (request.greedyRows) {
    greedy = request.sequences.map((seq, s) => {
      const rows = seq.logitRows.length;
      const rowsOf: GreedyRows = { tokens: new Int32Array(rows), logits: new Float32Array(rows) };
      for (let row = 0; row < rows; row++) {
        rowsOf.tokens[row] = reader.u32(`greedy token of sequence ${s}, row ${row}`) | 0;
        rowsOf.logits[row] = reader.f32s(1, `greedy logit of sequence ${s}, row ${row}`)[0]!;
      }
      return rowsOf;
    });
    logits = request.sequences.map(() => new Float32Array(0));
  } else {
    logits = request.sequences.map((seq, s) => reader.f32s(seq.logitRows.length * info.vocab, `logits of sequence ${s}`));
  }
  let stats: AttentionStats[][] | undefined;
  if (request.stats) {
    stats = request.sequences.map((seq, s) => {
      const queries = seq.queryRows?.length ?? 0;
      const nChunks = Math.max(0, (seq.chunkBounds?.length ?? 1) - 1);
      const len = statsLength(seq);
      const perChunk = request.chunkMass === true;
      const layers: AttentionStats[] = [];
      for (let layer = 0; layer < info.layers; layer++) {
        const mass = reader.f32s(queries * (perChunk ? nChunks : len), `attention mass of sequence ${s}, layer ${layer}`);
        const chunks = reader.f32s(nChunks * nChunks, `chunk attention of sequence ${s}, layer ${layer}`);
        layers.push({ mass, queries, len, perChunk, chunks, nChunks });
      }
      return layers;
    });
  }
  let earlyStop: EarlyStopResult[] | undefined;
  if (request.stats && request.earlyStop) {
    earlyStop = request.sequences.map((_, s) => {
      const cutoffLayer = reader.u32(`cutoff layer of sequence ${s}`);
      const focused = Array.from(reader.u32s(reader.u32(`focused chunk count of sequence ${s}`), `focused chunks of sequence ${s}`));
      return { cutoffLayer, focused };
    });
  }
  let expertRoutes: ForwardResult["expertRoutes"];
  if (request.expertRoutes) {
    const k = reader.u32("experts per token");
    expertRoutes = request.sequences.map((seq, s) => {
      const layers: Uint32Array[] = [];
      for (let layer = 0; layer < info.layers; layer++) layers.push(reader.u32s(seq.tokens.length * k, `experts of sequence ${s}, layer ${layer}`));
      return { k, layers };
    });
  }
  reader.end();
  const result: ForwardResult = { logits };
  if (expertRoutes !== undefined) result.expertRoutes = expertRoutes;
  if (greedy !== undefined) result.greedy = greedy;
  if (stats !== undefined) result.stats = stats;
  if (earlyStop !== undefined) result.earlyStop = earlyStop;
  return result;
}

// ---------------------------------------------------------------------------
// EXPORT and IMPORT

export interface KvRange {
  table: readonly number[];
  /**
   * On a runner with two KV groups, required: the sliding-window group's table, indexed like
   * `table`; every block of the span must be there (the span covers every layer).
   */
  slidingTable?: readonly number[];
  /** First sequence index. */
  start: number;
  count: number;
  /**
   * Two KV groups only: which layers EXPORT reads and IMPORT writes, 1 the global layers, 2 the
   * sliding-window ones, 3 (default) both; a group left out is not touched (EXPORT: zeros) and its
   * table need not hold the span.
   */
  groups?: 1 | 2 | 3;
}

export interface LayerKv {
  /** count × kv_width, without RoPE. */
  k: Float32Array;
  v: Float32Array;
}

export interface KvData {
  positions: Int32Array;
  layers: LayerKv[];
}

/** A block table, then (two KV groups) its sliding-window table. */
function writeTables(writer: BodyWriter, table: readonly number[], slidingTable: readonly number[] | undefined): BodyWriter {
  writer.u32(table.length).u32s(table);
  if (slidingTable !== undefined) writer.u32(slidingTable.length).u32s(slidingTable);
  return writer;
}

function tablesBytes(table: readonly number[], slidingTable: readonly number[] | undefined): number {
  return 4 + 4 * table.length + (slidingTable === undefined ? 0 : 4 + 4 * slidingTable.length);
}

export function encodeExport(range: KvRange): Uint8Array {
  const writer = writeTables(new BodyWriter(8 + tablesBytes(range.table, range.slidingTable) + (range.groups === undefined ? 0 : 4)), range.table, range.slidingTable).u32(range.start).u32(range.count);
  if (range.groups !== undefined) writer.u32(range.groups);
  return writer.finish();
}

export function decodeExportResponse(body: Uint8Array, count: number, info: Pick<RunnerInfo, "layers" | "kv_heads" | "head_dim">): KvData {
  const reader = new BodyReader(body, "EXPORT response");
  const width = kvWidth(info);
  const positions = reader.i32s(count, "positions");
  const layers: LayerKv[] = [];
  for (let layer = 0; layer < info.layers; layer++) {
    const k = reader.f32s(count * width, `K of layer ${layer}`);
    const v = reader.f32s(count * width, `V of layer ${layer}`);
    layers.push({ k, v });
  }
  reader.end();
  return { positions, layers };
}

export function encodeImport(range: KvRange, data: KvData, info: Pick<RunnerInfo, "layers" | "kv_heads" | "head_dim">): Uint8Array {
  const width = kvWidth(info);
  const { count } = range;
  if (data.positions.length !== count) throw new ProtocolError(`IMPORT: ${data.positions.length} positions for ${count} entries`);
  if (data.layers.length !== info.layers) throw new ProtocolError(`IMPORT: ${data.layers.length} layers of K/V for a model of ${info.layers}`);
  data.layers.forEach((layer, i) => {
    if (layer.k.length !== count * width || layer.v.length !== count * width) {
      throw new ProtocolError(`IMPORT: layer ${i} K/V must hold ${count} × ${width} values each, got ${layer.k.length} and ${layer.v.length}`);
    }
  });
  const writer = new BodyWriter(8 + tablesBytes(range.table, range.slidingTable) + 4 * count + info.layers * 2 * 4 * count * width + (range.groups === undefined ? 0 : 4));
  writeTables(writer, range.table, range.slidingTable).u32(range.start).u32(count).i32s(data.positions);
  for (const layer of data.layers) writer.f32s(layer.k).f32s(layer.v);
  if (range.groups !== undefined) writer.u32(range.groups);
  return writer.finish();
}

// ---------------------------------------------------------------------------
// RELOCATE, KEY_SUMMARY and KEY_SCORES

/**
 * RELOCATE: K/V of source entries srcStart .. srcStart+count-1 copied to destination entries
 * dstStart .. dstStart+count-1 (all layers), K re-rotated to `positions`. Source and destination
 * may be the same entries (in-place re-rotation), never otherwise overlapping slots.
 */
export interface RelocateRequest {
  srcTable: readonly number[];
  /** On a runner with two KV groups, required: the sliding-window tables of source and destination (KvRange.slidingTable). */
  srcSlidingTable?: readonly number[];
  dstSlidingTable?: readonly number[];
  srcStart: number;
  count: number;
  dstTable: readonly number[];
  dstStart: number;
  /** The destination entries' rotary positions (count values). */
  positions: ArrayLike<number>;
}

export function encodeRelocate(request: RelocateRequest): Uint8Array {
  const { count } = request;
  if (request.positions.length !== count) throw new ProtocolError(`RELOCATE: ${request.positions.length} positions for ${count} entries`);
  if ((request.srcSlidingTable === undefined) !== (request.dstSlidingTable === undefined)) throw new ProtocolError("RELOCATE: sliding tables are given for both source and destination or for neither");
  const writer = new BodyWriter(12 + tablesBytes(request.srcTable, request.srcSlidingTable) + tablesBytes(request.dstTable, request.dstSlidingTable) + 4 * count);
  writeTables(writer, request.srcTable, request.srcSlidingTable).u32(request.srcStart).u32(count);
  writeTables(writer, request.dstTable, request.dstSlidingTable).u32(request.dstStart);
  writer.i32s(request.positions);
  return writer.finish();
}

/** KEY_SUMMARY: per block, its written slots and their mean K without RoPE. */
export interface KeySummary {
  /** Per block: how many of its slots are written. */
  counts: Uint32Array;
  /**
   * blocks × (layers × kv_width), row-major: per block the mean K without RoPE over its written
   * slots, layer 0's kv_width values first; zeros for a block with no written slot.
   */
  summaries: Float32Array;
}

export function encodeKeySummary(blocks: readonly number[]): Uint8Array {
  return new BodyWriter(4 + 4 * blocks.length).u32(blocks.length).u32s(blocks).finish();
}

export function decodeKeySummaryResponse(body: Uint8Array, blocks: number, info: Pick<RunnerInfo, "layers" | "kv_heads" | "head_dim">): KeySummary {
  const reader = new BodyReader(body, "KEY_SUMMARY response");
  const counts = reader.u32s(blocks, "counts");
  const summaries = reader.f32s(blocks * info.layers * kvWidth(info), "summaries");
  reader.end();
  return { counts, summaries };
}

/**
 * KEY_SCORES: per slot of each listed block, the dot product of its K without RoPE with `anchor`
 * (layers × kv_width floats, layer-major as KEY_SUMMARY's rows), summed over the layers.
 */
export function encodeKeyScores(blocks: readonly number[], anchor: Float32Array, info: Pick<RunnerInfo, "layers" | "kv_heads" | "head_dim">): Uint8Array {
  const width = info.layers * kvWidth(info);
  if (anchor.length !== width) throw new ProtocolError(`KEY_SCORES: an anchor of ${anchor.length} floats for keys of ${width}`);
  return new BodyWriter(4 + 4 * blocks.length + 4 * width).u32(blocks.length).u32s(blocks).f32s(anchor).finish();
}

/** blocks × block_size scores, block by block; -Infinity for a slot not written. */
export function decodeKeyScoresResponse(body: Uint8Array, blocks: number, info: Pick<RunnerInfo, "block_size">): Float32Array {
  const reader = new BodyReader(body, "KEY_SCORES response");
  const scores = reader.f32s(blocks * info.block_size, "scores");
  reader.end();
  return scores;
}

// ---------------------------------------------------------------------------
// PROFILE

/** Where FORWARD spent its time since the previous PROFILE (seconds and FLOPs). */
export interface RunnerProfile {
  calls: number;
  tokens: number;
  total_seconds: number;
  linear_seconds: number;
  linear_flops: number;
  attention_seconds: number;
  attention_flops: number;
}

export function encodeProfile(on: boolean): Uint8Array {
  return new BodyWriter(4).u32(on ? 1 : 0).finish();
}

export function decodeProfile(body: Uint8Array): RunnerProfile {
  const json = JSON.parse(decodeText(body)) as RunnerProfile;
  for (const key of ["calls", "tokens", "total_seconds", "linear_seconds", "linear_flops", "attention_seconds", "attention_flops"] as const) {
    if (typeof json[key] !== "number") throw new ProtocolError(`PROFILE response lacks ${key}`);
  }
  return json;
}
