/**
 * KV events in the engines' wire layouts (issue 19 item 5), pure: the prefix cache's stored /
 * removed / cleared calls become vLLM's BlockStored / BlockRemoved / AllBlocksCleared events, and
 * a batch of them becomes the msgpack payload a ZeroMQ subscriber (ctxr's proxy, NVIDIA Dynamo,
 * llm-d) decodes (kvEventDecoding.ts reads all three layouts back).
 *
 * Three layouts exist (KV_EVENT_LAYOUTS); the default is vLLM's main branch
 * (`vllm/distributed/kv_events.py`, msgspec structs without `array_like`): the batch is a map
 * `{ts, events, data_parallel_rank}` and each event a map tagged by `type`, its fields in vLLM's
 * order. Fields vLLM leaves at their defaults (`extra_keys`, `group_idx`, `kv_cache_spec_kind`,
 * `kv_cache_spec_sliding_window`) are omitted, as msgspec's `omit_defaults` does when they are
 * null.
 */
import { encode } from "@msgpack/msgpack";
import { BLOCK_HASH_HEX_LENGTH, type KvCacheGroupTag, type StoredPrefixBlock } from "./prefixBlockCache.ts";

/**
 * How block hashes go on the wire: `bytes`, the whole 128-bit hash as 16 raw bytes (msgpack bin,
 * as vLLM sends its digests with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0), or `int`, its low 64
 * bits as an unsigned integer (as vLLM sends them by default; the same number consumers that fold
 * byte hashes take: the last 8 bytes, big-endian).
 */
export type BlockHashEncoding = "bytes" | "int";
export const BLOCK_HASH_ENCODINGS: readonly BlockHashEncoding[] = ["bytes", "int"];

/** vLLM's MEDIUM_GPU: the engine's own KV memory (whatever the runner's device). */
export const KV_MEDIUM = "GPU";

export type ExternalBlockHash = Uint8Array | bigint;

export interface BlockStoredEvent {
  type: "BlockStored";
  block_hashes: ExternalBlockHash[];
  parent_block_hash: ExternalBlockHash | null;
  token_ids: number[];
  block_size: number;
  lora_id: null;
  medium: string;
  lora_name: null;
  /** On a model with two KV cache groups (vLLM's hybrid KV cache): the block's group. */
  extra_keys?: null;
  group_idx?: number;
  kv_cache_spec_kind?: string;
  kv_cache_spec_sliding_window?: number | null;
}

export interface BlockRemovedEvent {
  type: "BlockRemoved";
  block_hashes: ExternalBlockHash[];
  medium: string;
  group_idx?: number;
}

export interface AllBlocksClearedEvent {
  type: "AllBlocksCleared";
}

export type KvCacheEvent = BlockStoredEvent | BlockRemovedEvent | AllBlocksClearedEvent;

/**
 * How a batch is laid out:
 * - `map`: vLLM's main branch, a map batch of map events (`{"type": "BlockStored", …}`);
 * - `array`: SGLang and vLLM before it dropped msgspec's `array_like`, an array batch
 *   `[ts, events, data_parallel_rank]` of tagged array events (`["BlockStored", hashes, …]`, the
 *   fields in declaration order, trailing null ones left out);
 * - `mixed`: released vLLM 0.24 and later, an array batch of map events.
 */
export type KvEventLayout = "map" | "array" | "mixed";
export const KV_EVENT_LAYOUTS: readonly KvEventLayout[] = ["map", "array", "mixed"];

/** A prefix-cache hash (32 hex chars) as it goes on the wire. */
export function externalBlockHash(hash: string, encoding: BlockHashEncoding): ExternalBlockHash {
  if (hash.length !== BLOCK_HASH_HEX_LENGTH || !/^[0-9a-f]+$/.test(hash)) throw new RangeError(`externalBlockHash: expected ${BLOCK_HASH_HEX_LENGTH} lowercase hex characters, got '${hash}'`);
  if (encoding === "int") return BigInt(`0x${hash.slice(BLOCK_HASH_HEX_LENGTH - 16)}`);
  return Uint8Array.from(Buffer.from(hash, "hex"));
}

/**
 * One BlockStored event per chain in `blocks` (a run of blocks each of whose parent is the one
 * before it), its parent the chain's first block's parent. The block size is the blocks' token
 * count (every stored block is full).
 */
export function blockStoredEvents(blocks: readonly StoredPrefixBlock[], encoding: BlockHashEncoding): BlockStoredEvent[] {
  const events: BlockStoredEvent[] = [];
  let current: BlockStoredEvent | null = null;
  let last: string | null = null;
  for (const block of blocks) {
    if (current === null || block.parent === null || block.parent !== last || block.tokens.length !== current.block_size || block.group?.index !== current.group_idx) {
      current = {
        type: "BlockStored",
        block_hashes: [],
        parent_block_hash: block.parent === null ? null : externalBlockHash(block.parent, encoding),
        token_ids: [],
        block_size: block.tokens.length,
        lora_id: null,
        medium: KV_MEDIUM,
        lora_name: null,
        ...groupFields(block.group),
      };
      events.push(current);
    }
    current.block_hashes.push(externalBlockHash(block.hash, encoding));
    for (const token of block.tokens) current.token_ids.push(token);
    last = block.hash;
  }
  return events;
}

/**
 * A group's fields as vLLM's BlockStored has them: group_idx, kv_cache_spec_kind and, for a
 * sliding-window group, kv_cache_spec_sliding_window; extra_keys (null) precedes them so that the
 * array layout keeps their positions (the map layout omits it, as msgspec omits a null default).
 */
function groupFields(group: KvCacheGroupTag | undefined): Partial<BlockStoredEvent> {
  if (group === undefined) return {};
  return { extra_keys: null, group_idx: group.index, kv_cache_spec_kind: group.kind, kv_cache_spec_sliding_window: group.slidingWindow ?? null };
}

export function blockRemovedEvent(hashes: readonly string[], encoding: BlockHashEncoding, group?: KvCacheGroupTag): BlockRemovedEvent {
  const event: BlockRemovedEvent = { type: "BlockRemoved", block_hashes: hashes.map((hash) => externalBlockHash(hash, encoding)), medium: KV_MEDIUM };
  if (group !== undefined) event.group_idx = group.index;
  return event;
}

export function allBlocksClearedEvent(): AllBlocksClearedEvent {
  return { type: "AllBlocksCleared" };
}

/**
 * The msgpack payload of one batch: `{ts, events, data_parallel_rank}` (or the array
 * `[ts, events, data_parallel_rank]`). `ts` (seconds since the epoch) is always a float64, as
 * msgspec writes a float, even when it happens to be whole (the msgpack library would write a
 * whole number as an integer).
 */
export function encodeKvEventBatch(ts: number, events: readonly KvCacheEvent[], options: { layout?: KvEventLayout; dataParallelRank?: number } = {}): Uint8Array {
  const layout = options.layout ?? "map";
  const rank = options.dataParallelRank ?? 0;
  const wireEvents = layout === "array" ? events.map(arrayEvent) : events.map(mapEvent);
  const encodedEvents = encode(wireEvents, { useBigInt64: true });
  if (layout === "map") return Buffer.concat([Uint8Array.of(0x83), encode("ts"), float64(ts), encode("events"), encodedEvents, encode("data_parallel_rank"), encode(rank)]);
  return Buffer.concat([Uint8Array.of(0x93), float64(ts), encodedEvents, encode(rank)]);
}

/** A map event: null fields vLLM gives a default (extra_keys, kv_cache_spec_sliding_window) are omitted. */
function mapEvent(event: KvCacheEvent): KvCacheEvent {
  if (event.type !== "BlockStored" || (event.extra_keys === undefined && event.kv_cache_spec_sliding_window === undefined)) return event;
  const out: Record<string, unknown> = { ...event };
  if (out.extra_keys === null) delete out.extra_keys;
  if (out.kv_cache_spec_sliding_window === null) delete out.kv_cache_spec_sliding_window;
  return out as unknown as KvCacheEvent;
}

/** A tagged array: the type, then the field values in order, trailing nulls left out. */
function arrayEvent(event: KvCacheEvent): unknown[] {
  const values = Object.values(event);
  while (values.length > 1 && values[values.length - 1] === null) values.pop();
  return values;
}

function float64(value: number): Uint8Array {
  const out = new Uint8Array(9);
  out[0] = 0xcb;
  new DataView(out.buffer).setFloat64(1, value, false);
  return out;
}
