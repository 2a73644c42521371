/**
 * The host tier of the chunk caches: variants' KV held in this process's memory,
 * by key (the variant id), with a capacity in bytes. The tier only keeps count;
 * it never chooses what to give up: when puts take it over capacity,
 * overflowBytes() says how much must leave and the caller demotes or drops
 * entries by its own priority (reuse frequency, recency).
 */
import { ByteBudgetedMap } from "../collections/byteBudgetedMap.ts";
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
  private readonly entries: ByteBudgetedMap<HostKvEntry<M>>;

  constructor(readonly capacityBytes: number) {
    this.entries = new ByteBudgetedMap<HostKvEntry<M>>(capacityBytes, "host KV tier");
  }

  /**
   * Stores (or replaces) an entry. The tier keeps `data` itself, not a copy: the
   * caller must not change it afterwards. Returns false, changing nothing, when
   * the entry alone is larger than the capacity; otherwise true, even when the
   * tier is now over capacity (see overflowBytes).
   */
  put(key: string, data: KvData, meta: M): boolean {
    const bytes = kvDataBytes(data);
    if (!this.entries.fits(bytes)) return false;
    this.entries.set(key, { data, meta, bytes });
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
    return this.entries.delete(key) !== undefined;
  }

  /** The keys, least recently put first. */
  keys(): string[] {
    return this.entries.keys();
  }

  get size(): number {
    return this.entries.size;
  }

  get bytesUsed(): number {
    return this.entries.bytesUsed;
  }

  /** How many bytes must leave to be within capacity (0 when within). */
  overflowBytes(): number {
    return this.entries.overflowBytes();
  }
}
