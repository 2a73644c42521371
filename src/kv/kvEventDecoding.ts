/**
 * KV event batches from engines, decoded and normalized, pure (the reading side of
 * kvEventBatch.ts). Every layout engines send is read (kvEventBatch.ts's KvEventLayout: vLLM
 * main's maps, SGLang's and older vLLM's tagged arrays, released vLLM's array batch of maps),
 * hashes of either kind (bytes, or integers up to 64 bits, signed or not), array events with
 * their trailing defaults left out, and fields or event types it does not know (ignored).
 *
 * Block hashes become BlockHashKeys, one string per hash whatever its wire form: bytes as "x"
 * then lowercase hex, integers in decimal (a leading "-" when negative). The two never collide,
 * and the same integer sent in any msgpack width gives the same key.
 */
import { Decoder } from "@msgpack/msgpack";
import type { KvEventLayout } from "./kvEventBatch.ts";
import { msgpackShapeProblem, type MsgpackShapeLimits } from "./msgpackShape.ts";

export type BlockHashKey = string;

export interface BlockStored {
  type: "BlockStored";
  /** The stored blocks, in chain order (each block's parent the one before it). */
  hashes: BlockHashKey[];
  /** The first block's parent; null for a prompt's first block. */
  parent: BlockHashKey | null;
  /** The blocks' tokens, blockSize per block (engines store full blocks). */
  tokenIds: number[];
  blockSize: number;
  /** "GPU" for the engine's own KV memory; "CPU", "DISK"... for offload tiers; null when not sent. */
  medium: string | null;
  loraId: number | null;
  loraName: string | null;
  /** vLLM's KV cache group of hybrid models (full attention, sliding window...); null when not sent. */
  groupIdx: number | null;
  /** vLLM's kind of that group ("full_attention", "sliding_window", "mamba"...); absent when not sent. */
  specKind?: string;
}

export interface BlockRemoved {
  type: "BlockRemoved";
  hashes: BlockHashKey[];
  medium: string | null;
  groupIdx: number | null;
}

export interface AllBlocksCleared {
  type: "AllBlocksCleared";
}

export type KvEvent = BlockStored | BlockRemoved | AllBlocksCleared;

export interface DecodedKvEventBatch {
  /** The engine's clock when it published the batch, seconds since the epoch. */
  ts: number;
  events: KvEvent[];
  dataParallelRank: number | null;
  layout: KvEventLayout;
  /** Event types it does not know (skipped), by name. */
  unknownTypes: string[];
}

/** Why a payload could not be used: the kind counts it, the detail says what was wrong. */
export class KvEventDecodeError extends Error {
  constructor(
    readonly kind: "msgpack" | "batch" | "event" | "limits",
    detail: string,
  ) {
    super(detail);
    this.name = "KvEventDecodeError";
  }
}

// int64/uint64 as bigint: 64-bit hashes are beyond 2^53 and would otherwise lose their low bits.
const decoder = new Decoder({ useBigInt64: true });

export function blockHashKey(value: unknown): BlockHashKey | null {
  if (value instanceof Uint8Array) return `x${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("hex")}`;
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number" && Number.isSafeInteger(value)) return String(value);
  return null;
}

/** What one payload may hold, checked before it is decoded (the decoded events: after). */
export interface KvEventDecodeLimits extends MsgpackShapeLimits {
  /** Events in one batch. */
  maxEvents: number;
}

/**
 * The defaults: far above what an engine step publishes (a step stores at most its batch's tokens,
 * ~100K), and at most ~100 MB of JavaScript values however a 16 MiB payload is made. Batches nest
 * five levels (batch, events, event, hash list, hash); unknown fields may nest a little more.
 */
export const DEFAULT_KV_EVENT_DECODE_LIMITS: KvEventDecodeLimits = {
  maxEvents: 100_000,
  maxValues: 4 * 1024 * 1024,
  maxObjects: 1024 * 1024,
  maxDepth: 16,
};

/** Decodes one payload; a KvEventDecodeError when it is not a batch, is over a limit, or one of its known events is malformed. */
export function decodeKvEventBatch(payload: Uint8Array, limits: KvEventDecodeLimits = DEFAULT_KV_EVENT_DECODE_LIMITS): DecodedKvEventBatch {
  const problem = msgpackShapeProblem(payload, limits);
  if (problem !== null) {
    const overLimit = problem.startsWith("more than") || problem.startsWith("nested");
    throw new KvEventDecodeError(overLimit ? "limits" : "msgpack", overLimit ? `not decoded: ${problem}` : `not msgpack: ${problem}`);
  }
  let value: unknown;
  try {
    value = decoder.decode(payload);
  } catch (error) {
    throw new KvEventDecodeError("msgpack", `not msgpack: ${(error as Error).message}`);
  }
  let ts: unknown;
  let events: unknown;
  let rank: unknown;
  let arrayBatch: boolean;
  if (Array.isArray(value)) {
    [ts, events, rank] = value;
    arrayBatch = true;
  } else if (isMap(value)) {
    ({ ts, events, data_parallel_rank: rank } = value);
    arrayBatch = false;
  } else throw new KvEventDecodeError("batch", `a batch is an array or a map, got ${describe(value)}`);
  const time = typeof ts === "bigint" ? Number(ts) : ts;
  if (typeof time !== "number" || !Number.isFinite(time)) throw new KvEventDecodeError("batch", `ts must be a number, got ${describe(ts)}`);
  if (!Array.isArray(events)) throw new KvEventDecodeError("batch", `events must be an array, got ${describe(events)}`);
  if (events.length > limits.maxEvents) throw new KvEventDecodeError("limits", `${events.length} events in one batch, over the limit of ${limits.maxEvents}`);
  const decoded: DecodedKvEventBatch = {
    ts: time,
    events: [],
    dataParallelRank: rank === undefined || rank === null ? null : integer(rank, "data_parallel_rank", "batch"),
    // An array batch without events could be either array layout; it reads as "array".
    layout: !arrayBatch ? "map" : events.some(isMap) ? "mixed" : "array",
    unknownTypes: [],
  };
  for (const [i, raw] of events.entries()) {
    const event = decodeEvent(raw, i);
    if (typeof event === "string") decoded.unknownTypes.push(event);
    else decoded.events.push(event);
  }
  return decoded;
}

/** A field reader over a tagged array (fields from index 1) or a map (fields by name). */
type Fields = (index: number, name: string) => unknown;

/** The event, or its type name when the type is not one it knows. */
function decodeEvent(raw: unknown, at: number): KvEvent | string {
  let type: unknown;
  let field: Fields;
  if (Array.isArray(raw)) {
    type = raw[0];
    field = (index) => raw[index];
  } else if (isMap(raw)) {
    type = raw.type;
    field = (_index, name) => raw[name];
  } else throw new KvEventDecodeError("event", `events[${at}] is an array or a map, got ${describe(raw)}`);
  if (typeof type !== "string") throw new KvEventDecodeError("event", `events[${at}] has no type tag`);
  const where = `events[${at}] (${type})`;
  switch (type) {
    case "BlockStored": {
      const blockSize = integer(field(4, "block_size"), `${where}.block_size`, "event");
      const specKind = optional(field(10, "kv_cache_spec_kind"), (v) => text(v, `${where}.kv_cache_spec_kind`));
      if (blockSize < 1) throw new KvEventDecodeError("event", `${where}.block_size must be positive, got ${blockSize}`);
      return {
        type,
        hashes: hashList(field(1, "block_hashes"), `${where}.block_hashes`),
        parent: optionalHash(field(2, "parent_block_hash"), `${where}.parent_block_hash`),
        tokenIds: tokenList(field(3, "token_ids"), `${where}.token_ids`),
        blockSize,
        loraId: optional(field(5, "lora_id"), (v) => integer(v, `${where}.lora_id`, "event")),
        medium: optional(field(6, "medium"), (v) => text(v, `${where}.medium`)),
        loraName: optional(field(7, "lora_name"), (v) => text(v, `${where}.lora_name`)),
        groupIdx: optional(field(9, "group_idx"), (v) => integer(v, `${where}.group_idx`, "event")),
        ...(specKind === null ? {} : { specKind }),
      };
    }
    case "BlockRemoved":
      return {
        type,
        hashes: hashList(field(1, "block_hashes"), `${where}.block_hashes`),
        medium: optional(field(2, "medium"), (v) => text(v, `${where}.medium`)),
        groupIdx: optional(field(3, "group_idx"), (v) => integer(v, `${where}.group_idx`, "event")),
      };
    case "AllBlocksCleared":
      return { type };
    default:
      return type;
  }
}

function isMap(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

function optional<T>(value: unknown, read: (value: unknown) => T): T | null {
  return value === undefined || value === null ? null : read(value);
}

function integer(value: unknown, what: string, kind: "batch" | "event"): number {
  const number = typeof value === "bigint" && value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
  if (typeof number !== "number" || !Number.isSafeInteger(number)) throw new KvEventDecodeError(kind, `${what} must be an integer, got ${describe(value)}`);
  return number;
}

function text(value: unknown, what: string): string {
  if (typeof value !== "string") throw new KvEventDecodeError("event", `${what} must be a string, got ${describe(value)}`);
  return value;
}

function hashList(value: unknown, what: string): BlockHashKey[] {
  if (!Array.isArray(value)) throw new KvEventDecodeError("event", `${what} must be an array, got ${describe(value)}`);
  const out = new Array<BlockHashKey>(value.length);
  for (let i = 0; i < value.length; i++) {
    const key = blockHashKey(value[i]);
    if (key === null) throw new KvEventDecodeError("event", `${what}[${i}] must be bytes or an integer, got ${describe(value[i])}`);
    out[i] = key;
  }
  return out;
}

function optionalHash(value: unknown, what: string): BlockHashKey | null {
  if (value === undefined || value === null) return null;
  const key = blockHashKey(value);
  if (key === null) throw new KvEventDecodeError("event", `${what} must be bytes, an integer or null, got ${describe(value)}`);
  return key;
}

function tokenList(value: unknown, what: string): number[] {
  if (!Array.isArray(value)) throw new KvEventDecodeError("event", `${what} must be an array, got ${describe(value)}`);
  for (let i = 0; i < value.length; i++) {
    const token = value[i];
    if (typeof token === "number" && Number.isSafeInteger(token) && token >= 0) continue;
    if (typeof token === "bigint" && token >= 0n && token <= BigInt(Number.MAX_SAFE_INTEGER)) value[i] = Number(token);
    else throw new KvEventDecodeError("event", `${what}[${i}] must be a non-negative integer, got ${describe(token)}`);
  }
  return value as number[];
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (value === undefined) return "nothing";
  if (Array.isArray(value)) return "an array";
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  if (typeof value === "object") return "a map";
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  return `${typeof value} ${String(value)}`;
}
