/**
 * The host tier of the chunk caches: variants' KV held in this process's memory,
 * by key (the variant id), with a capacity in bytes. The tier only keeps count;
 * it never chooses what to give up: when puts take it over capacity,
 * overflowBytes() says how much must leave and the caller demotes or drops
 * entries by its own priority (reuse frequency, recency).
 */
import type { KvData } from "../runner/runnerProtocol.ts";

export interface HostKvEntry<M extends object = object> {
  data: KvData;
  meta: M;
  /** The bytes the entry counts for (its positions and K/V arrays). */
  bytes: number;
}

/** The bytes a KvData holds: its positions and every layer's K and V. */
export function kvDataBytes(data: KvData): number {
  let bytes = data.positions.byteLength;
  for (const layer of data.layers) bytes += layer.k.byteLength + layer.v.byteLength;
  return bytes;
}

export class HostKvTier<M extends object = object> {
  private readonly entries = new Map<string, HostKvEntry<M>>();
  private used = 0;

  constructor(readonly capacityBytes: number) {
    if (!(capacityBytes >= 0)) throw new RangeError(`host KV tier: bad capacity ${capacityBytes}`);
  }

  /**
   * Stores (or replaces) an entry. The tier keeps `data` itself, not a copy: the
   * caller must not change it afterwards. Returns false, changing nothing, when
   * the entry alone is larger than the capacity; otherwise true, even when the
   * tier is now over capacity (see overflowBytes).
   */
  put(key: string, data: KvData, meta: M): boolean {
    const bytes = kvDataBytes(data);
    if (bytes > this.capacityBytes) return false;
    const previous = this.entries.get(key);
    if (previous !== undefined) {
      this.used -= previous.bytes;
      this.entries.delete(key);
    }
    this.entries.set(key, { data, meta, bytes });
    this.used += bytes;
    return true;
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  get(key: string): HostKvEntry<M> | undefined {
    return this.entries.get(key);
  }

  /** Removes an entry; false when there was none. */
  delete(key: string): boolean {
    const entry = this.entries.get(key);
    if (entry === undefined) return false;
    this.entries.delete(key);
    this.used -= entry.bytes;
    return true;
  }

  /** The keys, least recently put first. */
  keys(): string[] {
    return [...this.entries.keys()];
  }

  get size(): number {
    return this.entries.size;
  }

  get bytesUsed(): number {
    return this.used;
  }

  /** How many bytes must leave to be within capacity (0 when within). */
  overflowBytes(): number {
    return Math.max(0, this.used - this.capacityBytes);
  }
}
