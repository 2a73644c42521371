/**
 * The chunk-cache store: every cached chunk variant's KV in exactly one tier —
 * device (blocks in the runner's paged cache, K rotated at the positions it was
 * computed at), host (this process's memory, K without RoPE) or disk (a file in
 * --kv-dir) — and its metadata in the ChunkVariantIndex (variants per chunk,
 * frequency-reuse eviction, the exact-prefix radix).
 *
 * - A hit is placed into a request's sequence: from the device by RELOCATE (a copy
 *   inside the runner, K re-rotated to the new positions), from host or disk by
 *   IMPORT. Host and disk hits are promoted to the device afterwards.
 * - A newly computed chunk is stored by RELOCATE from the request's sequence into
 *   blocks of its own, after the request's first token.
 * - Over a tier's capacity the variants with the lowest frequency-reuse move down
 *   (device → host → disk); out of the last tier they are dropped. The scheduler
 *   calls reclaim() when requests need the device blocks.
 * - Disk files carry the model's identity and a checksum; a damaged one is
 *   discarded when read (DiskKvTier) and the variant is forgotten.
 * - On a model with two KV cache groups (global and sliding-window layers, Gemma 3) a variant holds
 *   every layer's K/V of all its tokens (the sliding layers' too, not only the window a later
 *   request reads: the chunk may be placed anywhere). The request's sequence passes its sliding
 *   table beside its block table; the device tier is off there (a device copy would hold sliding
 *   blocks outside any window), so variants live in the host and disk tiers and are placed by IMPORT,
 *   which rotates each layer's K with that layer's own RoPE base.
 * - With a remote tier (--kv-remote, RemoteKvTier), a chunk with no variant here is looked up
 *   there before its request is planned (fetchRemote): the variants found are kept in the host
 *   tier (or on disk) like any other, and their first hit counts as a remote one. Every variant
 *   stored here is written through to the remote tier in the background.
 */
import { randomUUID } from "node:crypto";
import type { KvData, RunnerInfo, KvRange } from "../runner/runnerProtocol.ts";
import { KvBlockTable, type KvBlockPool } from "./kvBlockTable.ts";
import { ChunkVariantIndex, type ChunkVariant } from "./chunkVariantIndex.ts";
import type { VariantMetadata } from "./reuseScores.ts";
import { HostKvTier } from "./hostKvTier.ts";
import type { DiskKvTier } from "./diskKvTier.ts";
import type { RemoteKvStats, RemoteKvTier } from "./remoteKvTier.ts";
import type { QueuedPrefill } from "./cacheAwareOrder.ts";
import type { SegmentedPrompt } from "./segmentedPrompt.ts";

/** Where a variant's KV is (remote: fetched from --kv-remote for this hit). */
export type KvTier = "device" | "host" | "disk" | "remote";
/** The tiers a variant is kept in here. */
export type LocalKvTier = Exclude<KvTier, "remote">;

/**
 * Placing a chunk in a sequence with two KV groups: its sliding-window table, and, when the
 * prefill holds only a window of it (slidingPrefillWindow.ts), who takes the chunk's K/V — the
 * IMPORT then writes the global layers alone, the sliding ones as windows need them.
 */
export interface SlidingPlacement {
  table: readonly number[];
  windowed?: (data: KvData) => void;
}

/** Storing a chunk of a sequence with two KV groups: its sliding table, or the chunk's K/V as the prefill kept it (SlidingPrefillWindow.kvOf). */
export interface SlidingStore {
  table: readonly number[];
  data?: KvData;
}

/** The runner ops the chunk cache uses (RunnerProcess has them). */
export interface ChunkCacheRunner {
  readonly info: RunnerInfo;
  relocate(request: { srcTable: readonly number[]; srcStart: number; count: number; dstTable: readonly number[]; dstStart: number; positions: Int32Array }): Promise<void>;
  export(range: KvRange): Promise<KvData>;
  import(range: KvRange, data: KvData): Promise<void>;
}

export interface ChunkCacheOptions {
  /** Most runner blocks the device tier may hold (default: a quarter of the cache). */
  deviceBlocks?: number;
  /** Host tier capacity in bytes (default 1 GiB). */
  hostBytes?: number;
  /** The disk tier (--kv-dir), or none. */
  disk?: DiskKvTier | null;
  /** The remote tier (--kv-remote), or none. */
  remote?: RemoteKvTier | null;
  /** Variants per chunk (M, default 4). */
  maxVariantsPerChunk?: number;
  /** Variants in all (N×M, default 4096). */
  maxVariants?: number;
  log?: (line: string) => void;
}

/** Serialisable metadata of a variant (tier files, the index after a restart). */
export interface StoredVariantMeta {
  chunkHash: string;
  tokenCount: number;
  prefix: string[];
  exact: boolean;
  cci: number;
  interByPrefix: Record<string, number>;
  tokenInter: number[];
  /** VariantMetadata.tokenShift, when it was measured. */
  tokenShift?: number[];
  frequencyReuse: number;
}

export interface ChunkCacheStats {
  variants: number;
  chunks: number;
  deviceVariants: number;
  deviceBlocks: number;
  hostVariants: number;
  hostBytes: number;
  diskVariants: number;
  diskBytes: number;
  hits: Record<KvTier, number>;
  /** Variants fetched from the remote tier (kept here since). */
  remoteFetched: number;
  /** The remote tier's own counters (null without one). */
  remote: RemoteKvStats | null;
  stored: number;
  evicted: number;
  demoted: number;
  promoted: number;
  discarded: number;
}

export class ChunkCache {
  readonly index: ChunkVariantIndex;
  private readonly device = new Map<string, KvBlockTable>();
  private readonly host: HostKvTier;
  private readonly disk: DiskKvTier | null;
  private readonly remote: RemoteKvTier | null;
  /** Variants fetched from the remote tier whose first hit has not come yet: it counts as a remote hit. */
  private readonly fromRemote = new Set<string>();
  /** Write-throughs under way (from the export on). */
  private readonly remoteWrites = new Set<Promise<unknown>>();
  /** Remote lookups under way, by chunk hash. */
  private readonly remoteLookups = new Map<string, Promise<void>>();
  private deviceBlockLimit = 0;
  private pool: KvBlockPool | null = null;
  /** Chunks some running request is computing: a request that needs one waits for it (delay hit). */
  private readonly inFlight = new Map<string, number>();
  private readonly counters = { hits: { device: 0, host: 0, disk: 0, remote: 0 }, remoteFetched: 0, stored: 0, evicted: 0, demoted: 0, promoted: 0, discarded: 0 };

  constructor(
    private readonly runner: ChunkCacheRunner,
    private readonly options: ChunkCacheOptions = {},
  ) {
    this.index = new ChunkVariantIndex({ maxVariantsPerChunk: options.maxVariantsPerChunk ?? 4, maxVariants: options.maxVariants ?? 4096 });
    this.host = new HostKvTier(options.hostBytes ?? 2 ** 30);
    this.disk = options.disk ?? null;
    this.remote = options.remote ?? null;
  }

  /**
   * A variant's KV where reading it is cheap (for measuring its context shift off the request
   * path): exported from its device blocks, or the host tier's copy; null when it is on disk only
   * or gone.
   */
  async residentKv(id: string): Promise<KvData | null> {
    const variant = this.index.get(id);
    if (variant === undefined) return null;
    const onDevice = this.device.get(id);
    if (onDevice !== undefined) return this.runner.export({ table: onDevice.blocks, start: 0, count: variant.tokenCount });
    return this.host.get(id)?.data ?? null;
  }

  /** Records a variant's measured context shift (contextShift.ts); false when the variant is gone. */
  setTokenShift(id: string, shift: Float32Array): boolean {
    const variant = this.index.get(id);
    if (variant === undefined) return false;
    if (shift.length !== variant.tokenCount) throw new RangeError(`setTokenShift: ${shift.length} shifts for a variant of ${variant.tokenCount} tokens`);
    variant.meta.tokenShift = shift;
    const hosted = this.host.get(id);
    if (hosted !== undefined) (hosted.meta as StoredVariantMeta).tokenShift = Array.from(shift);
    return true;
  }

  /** Whether a remote tier is configured. */
  get hasRemote(): boolean {
    return this.remote !== null;
  }

  /** Waits for the remote tier's writes under way and disconnects from it. */
  async closeRemote(): Promise<void> {
    await Promise.all(this.remoteWrites);
    await this.remote?.close();
  }

  /** Resolves when the remote tier's background writes started so far have ended. */
  async remoteIdle(): Promise<void> {
    await Promise.all([...this.remoteLookups.values(), ...this.remoteWrites]);
    await this.remote?.idle();
  }

  /**
   * The block pool of the runner's cache (the scheduler's). Called again after a
   * runner restart: its blocks, and with them the device tier, are gone.
   */
  attachPool(pool: KvBlockPool): void {
    if (this.pool !== null) {
      for (const id of [...this.device.keys()]) {
        this.device.delete(id);
        this.index.remove(id);
      }
    }
    this.pool = pool;
    this.deviceBlockLimit = this.options.deviceBlocks ?? Math.floor(pool.totalBlocks / 4);
  }

  /** The tiers' capacities: device blocks (once a pool is attached), host bytes, disk folder and bytes. */
  get capacities(): { deviceBlocks: number; hostBytes: number; disk: { dir: string; bytes: number } | null; remote: { url: string; bytes: number } | null } {
    return {
      deviceBlocks: this.deviceBlockLimit,
      hostBytes: this.host.capacityBytes,
      disk: this.disk === null ? null : { dir: this.disk.dir, bytes: this.disk.capacityBytes },
      remote: this.remote === null ? null : { url: this.remote.display, bytes: this.remote.capacityBytes },
    };
  }

  private get blocks(): KvBlockPool {
    if (this.pool === null) throw new Error("ChunkCache: attachPool() was not called");
    return this.pool;
  }

  /** Bytes of one token's K and V over all layers (f32). */
  get tokenBytes(): number {
    const info = this.runner.info;
    return info.layers * 2 * info.kv_heads * info.head_dim * 4;
  }

  get stats(): ChunkCacheStats {
    let deviceBlocks = 0;
    for (const table of this.device.values()) deviceBlocks += table.blocks.length;
    return {
      variants: this.index.size,
      chunks: this.index.chunkCount,
      deviceVariants: this.device.size,
      deviceBlocks,
      hostVariants: this.host.keys().length,
      hostBytes: this.host.bytesUsed,
      diskVariants: this.disk?.keys().length ?? 0,
      diskBytes: this.disk?.bytesUsed ?? 0,
      hits: { ...this.counters.hits },
      remoteFetched: this.counters.remoteFetched,
      remote: this.remote?.stats ?? null,
      stored: this.counters.stored,
      evicted: this.counters.evicted,
      demoted: this.counters.demoted,
      promoted: this.counters.promoted,
      discarded: this.counters.discarded,
    };
  }

  /** Restores the index from the disk tier's files (after a restart). */
  async loadFromDisk(): Promise<number> {
    if (this.disk === null) return 0;
    const entries = await this.disk.scan();
    let loaded = 0;
    for (const { key, meta } of entries) {
      const stored = meta as unknown as StoredVariantMeta;
      if (typeof stored?.chunkHash !== "string") {
        await this.disk.delete(key);
        continue;
      }
      const evicted = this.index.add(variantFromStored(key, stored, this.tokenBytes));
      for (const gone of evicted) await this.drop(gone);
      loaded++;
    }
    return loaded;
  }

  /** Where a variant's KV is, or null when it is not cached. */
  tierOf(id: string): LocalKvTier | null {
    if (this.device.has(id)) return "device";
    if (this.host.has(id)) return "host";
    if (this.disk?.has(id)) return "disk";
    return null;
  }

  // ---------------------------------------------------------------------------
  // Delay hits

  /** Marks chunks as being computed by a running request. */
  computing(hashes: readonly string[]): void {
    for (const hash of hashes) this.inFlight.set(hash, (this.inFlight.get(hash) ?? 0) + 1);
  }

  /** The chunks are stored (or their request ended). */
  computed(hashes: readonly string[]): void {
    for (const hash of hashes) {
      const n = (this.inFlight.get(hash) ?? 0) - 1;
      if (n <= 0) this.inFlight.delete(hash);
      else this.inFlight.set(hash, n);
    }
  }

  /** Whether a chunk with no cached variant is being computed right now. */
  isInFlight(hash: string): boolean {
    return this.inFlight.has(hash);
  }

  /**
   * What a queued prompt needs from the cache (for cache-aware ordering), and
   * its disk-tier variants, which prefetch() can bring up while it waits.
   */
  describe(prompt: SegmentedPrompt): { queued: QueuedPrefill; onDisk: ChunkVariant[] } {
    const newChunks: string[] = [];
    const cachedChunks: string[] = [];
    const onDisk: ChunkVariant[] = [];
    let loadTokens = 0;
    let computeTokens = prompt.question.length;
    for (const segment of prompt.segments) {
      const variants = this.index.variantsOf(segment.hash);
      if (variants.length === 0) {
        newChunks.push(segment.hash);
        computeTokens += segment.tokens.length;
        continue;
      }
      cachedChunks.push(segment.hash);
      const tiers = variants.map((v) => this.tierOf(v.id));
      if (tiers.includes("device")) continue;
      loadTokens += segment.tokens.length;
      if (!tiers.includes("host")) onDisk.push(...variants.filter((_, k) => tiers[k] === "disk"));
    }
    return { queued: { newChunks, cachedChunks, loadTokens, computeTokens }, onDisk };
  }

  // ---------------------------------------------------------------------------
  // Hits

  /**
   * Writes a variant's KV into `table` at sequence indices start.. with the
   * given rotary positions. Returns the tier it came from, or null when its
   * disk file was damaged (the variant is forgotten; compute the chunk instead).
   */
  async place(variant: ChunkVariant, table: readonly number[], start: number, positions: Int32Array, sliding?: SlidingPlacement): Promise<KvTier | null> {
    const count = variant.tokenCount;
    const onDevice = this.device.get(variant.id);
    if (onDevice !== undefined) {
      await this.runner.relocate({ srcTable: onDevice.blocks, srcStart: 0, count, dstTable: table, dstStart: start, positions });
      this.counters.hits.device++;
      return "device";
    }
    let data = this.host.get(variant.id)?.data;
    let tier: KvTier = "host";
    if (data === undefined) {
      if (this.disk === null || !this.disk.has(variant.id)) return null;
      tier = "disk";
      const read = await this.readDisk(variant.id);
      if (read === null) return null;
      data = read;
    }
    if (sliding?.windowed === undefined) await this.runner.import({ table, ...slidingTableOf(sliding), start, count }, { positions, layers: data.layers });
    else {
      await this.runner.import({ table, slidingTable: sliding.table, start, count, groups: 1 }, { positions, layers: data.layers });
      sliding.windowed(data);
    }
    if (this.fromRemote.delete(variant.id)) {
      tier = "remote";
      this.remote?.touch(this.remote.keys.variant(variant.chunkHash, variant.prefix, variant.exact));
    }
    this.counters.hits[tier]++;
    return tier;
  }

  /** Reads a disk variant (a damaged file is discarded and the variant forgotten). */
  private async readDisk(id: string): Promise<KvData | null> {
    try {
      const entry = await this.disk!.read(id);
      if (entry === null) throw new Error("missing");
      return entry.data;
    } catch (error) {
      // A prefetch may have moved it up meanwhile.
      const moved = this.host.get(id);
      if (moved !== undefined) return moved.data;
      this.counters.discarded++;
      this.options.log?.(`ctxr: chunk cache file of ${id} discarded: ${(error as Error).message}`);
      this.index.remove(id);
      this.fromRemote.delete(id);
      return null;
    }
  }

  /** Moves disk variants of a queued request up to the host tier while it waits (prefetch). */
  async prefetch(variants: readonly ChunkVariant[]): Promise<void> {
    for (const variant of variants) {
      if (this.tierOf(variant.id) !== "disk") continue;
      const data = await this.readDisk(variant.id);
      if (data === null || this.host.has(variant.id)) continue;
      if (this.host.put(variant.id, data, storedMeta(variant))) {
        await this.disk!.delete(variant.id);
        this.counters.promoted++;
        await this.balance();
      }
    }
  }

  /**
   * After a host or disk hit was placed in a request's sequence: copies it into
   * device blocks of its own (the request's copy is rotated to its positions;
   * RELOCATE keeps them, placing re-rotates anyway) and drops the lower copy.
   */
  async promote(variant: ChunkVariant, table: readonly number[], start: number): Promise<void> {
    const tier = this.tierOf(variant.id);
    if (tier === null || tier === "device" || this.twoGroups) return;
    const copy = await this.copyToDevice(table, start, variant.tokenCount);
    if (copy === null) return;
    this.device.set(variant.id, copy);
    if (tier === "host") this.host.delete(variant.id);
    else await this.disk!.delete(variant.id);
    this.counters.promoted++;
    await this.balance();
  }

  /** Counts a use of a variant (frequency-reuse += 1/CFO). */
  recordUse(variant: ChunkVariant, cfo: number): void {
    this.index.recordUse(variant.id, cfo);
  }

  // ---------------------------------------------------------------------------
  // Stores

  /** Stores a chunk computed in a request's sequence (indices start..start+count-1) as a new variant. */
  async store(table: readonly number[], start: number, meta: Omit<StoredVariantMeta, "frequencyReuse">, sliding?: SlidingStore): Promise<ChunkVariant | null> {
    if (this.index.variantsOf(meta.chunkHash).some((v) => v.exact === meta.exact && sameList(v.prefix, meta.prefix))) return null;
    // Ids stay unique across restarts (the disk tier keeps files named after them).
    const variant = variantFromStored(`${meta.chunkHash.slice(0, 16)}-${randomUUID().slice(0, 8)}`, { ...meta, frequencyReuse: 0 }, this.tokenBytes);
    const copy = await this.copyToDevice(table, start, meta.tokenCount);
    if (copy !== null) {
      this.device.set(variant.id, copy);
      // Sent now, so the runner reads the copy before any later op can free or reuse its blocks;
      // not awaited: the remote write never holds up the step loop.
      if (this.remote !== null) this.writeRemote(variant, this.runner.export({ table: copy.blocks, start: 0, count: meta.tokenCount }));
    } else {
      // No device room: straight to the host tier (or disk).
      const data = sliding?.data ?? (await this.runner.export({ table, ...slidingTableOf(sliding), start, count: meta.tokenCount }));
      if (this.remote !== null) this.writeRemote(variant, Promise.resolve(data));
      if (!this.host.put(variant.id, data, storedMeta(variant)) && !(await this.writeDisk(variant, data))) return null;
    }
    const evicted = this.index.add(variant);
    for (const gone of evicted) await this.drop(gone);
    this.counters.stored++;
    await this.balance();
    return this.index.get(variant.id) ?? null;
  }

  /** Writes a variant through to the remote tier in the background (failures are the tier's to count). */
  private writeRemote(variant: ChunkVariant, data: Promise<KvData>): void {
    const remote = this.remote!;
    const meta = { ...storedMeta(variant), frequencyReuse: 0 };
    const write = data
      .then(
        (kv) => remote.write(variant.chunkHash, variant.prefix, variant.exact, kv, meta),
        (error) => this.options.log?.(`ctxr: chunk cache ${variant.id} could not be exported for the remote tier: ${(error as Error).message}`),
      )
      .finally(() => this.remoteWrites.delete(write));
    this.remoteWrites.add(write);
  }

  /**
   * Looks the prompt's chunks that have no variant here up in the remote tier (host → disk →
   * remote: only on a miss) and keeps what it finds in the host tier, or on disk, under the
   * usual policies. Never throws; resolves with the variants added.
   */
  async fetchRemote(chunkHashes: readonly string[]): Promise<number> {
    if (this.remote === null) return 0;
    const before = this.counters.remoteFetched;
    const lookups: Promise<void>[] = [];
    for (const hash of new Set(chunkHashes)) {
      if (this.index.variantsOf(hash).length > 0) continue;
      let lookup = this.remoteLookups.get(hash);
      if (lookup === undefined) {
        lookup = this.lookupRemote(hash).finally(() => this.remoteLookups.delete(hash));
        this.remoteLookups.set(hash, lookup);
      }
      lookups.push(lookup);
    }
    await Promise.all(lookups);
    return this.counters.remoteFetched - before;
  }

  private async lookupRemote(hash: string): Promise<void> {
    const entries = await this.remote!.lookup(hash);
    for (const entry of entries) {
      try {
        const stored = entry.meta as unknown as StoredVariantMeta;
        // Stored here meanwhile (by a request that computed it): keep that one.
        if (this.index.variantsOf(hash).some((v) => v.exact === stored.exact && sameList(v.prefix, stored.prefix))) continue;
        const id = `${hash.slice(0, 16)}-r${entry.key.slice(-12)}`;
        if (this.index.has(id)) continue;
        const variant = variantFromStored(id, { ...stored, frequencyReuse: 0 }, this.tokenBytes);
        if (!this.host.put(id, entry.data, storedMeta(variant)) && !(await this.writeDisk(variant, entry.data))) continue;
        let evicted: ChunkVariant[];
        try {
          evicted = this.index.add(variant);
        } catch (error) {
          this.host.delete(id);
          if (this.disk?.has(id)) await this.disk.delete(id);
          throw error;
        }
        this.fromRemote.add(id);
        this.counters.remoteFetched++;
        for (const gone of evicted) await this.drop(gone);
        await this.balance();
      } catch (error) {
        this.options.log?.(`ctxr: remote chunk cache entry ${entry.key} not kept: ${(error as Error).message}`);
      }
    }
  }

  /**
   * Runs `use` with a scratch table of `entries` entries from the cache's block pool, freed
   * afterwards; null (and `use` not run) when the pool has no room for it right now, or the model
   * has two KV groups.
   */
  async withScratch<T>(entries: number, use: (table: readonly number[]) => Promise<T>): Promise<T | null> {
    const scratch = new KvBlockTable(this.blocks.blockSize);
    // Two KV groups: a scratch table would need sliding blocks too; callers then go without (null).
    if (this.twoGroups || this.blocks.free < scratch.blocksNeeded(entries)) return null;
    await this.blocks.grow([{ table: scratch, entries }]);
    try {
      return await use(scratch.blocks);
    } finally {
      await this.blocks.release([scratch]);
    }
  }

  /** Whether the runner keeps two KV cache groups (the device tier is off then). */
  get twoGroups(): boolean {
    return this.runner.info.kv_groups !== undefined;
  }

  private async copyToDevice(table: readonly number[], start: number, count: number): Promise<KvBlockTable | null> {
    if (this.twoGroups) return null;
    const copy = new KvBlockTable(this.blocks.blockSize);
    const need = copy.blocksNeeded(count);
    if (need > this.deviceBlockLimit) return null;
    await this.makeDeviceRoom(need);
    if (this.blocks.free < need) return null;
    await this.blocks.grow([{ table: copy, entries: count }]);
    const positions = new Int32Array(count);
    for (let i = 0; i < count; i++) positions[i] = start + i;
    await this.runner.relocate({ srcTable: table, srcStart: start, count, dstTable: copy.blocks, dstStart: 0, positions });
    copy.length = count;
    return copy;
  }

  // ---------------------------------------------------------------------------
  // Capacity

  /** Frees device blocks by demoting variants until the pool has `blocks` free (or nothing is left to demote). */
  async reclaim(blocks: number): Promise<number> {
    let freed = 0;
    while (this.blocks.free < blocks) {
      const victim = this.lowest([...this.device.keys()]);
      if (victim === null) break;
      freed += await this.demoteFromDevice(victim);
    }
    return freed;
  }

  private async makeDeviceRoom(blocks: number): Promise<void> {
    while (this.deviceBlocksUsed() + blocks > this.deviceBlockLimit) {
      const victim = this.lowest([...this.device.keys()]);
      if (victim === null) break;
      await this.demoteFromDevice(victim);
    }
  }

  private deviceBlocksUsed(): number {
    let used = 0;
    for (const table of this.device.values()) used += table.blocks.length;
    return used;
  }

  /** Keeps host and disk within capacity (device is kept by makeDeviceRoom). */
  private async balance(): Promise<void> {
    while (this.host.overflowBytes() > 0) {
      const victim = this.lowest(this.host.keys());
      if (victim === null) break;
      const entry = this.host.get(victim.id)!;
      if (await this.writeDisk(victim, entry.data)) {
        this.counters.demoted++;
        this.host.delete(victim.id);
      } else {
        await this.drop(victim);
      }
    }
    while (this.disk !== null && this.disk.overflowBytes() > 0) {
      const victim = this.lowest(this.disk.keys());
      if (victim === null) break;
      await this.drop(victim);
    }
  }

  private async demoteFromDevice(variant: ChunkVariant): Promise<number> {
    const table = this.device.get(variant.id)!;
    const data = await this.runner.export({ table: table.blocks, start: 0, count: variant.tokenCount });
    this.device.delete(variant.id);
    const blocks = table.blocks.length;
    await this.blocks.release([table]);
    if (this.host.put(variant.id, data, storedMeta(variant))) {
      this.counters.demoted++;
      await this.balance();
    } else if (await this.writeDisk(variant, data)) {
      this.counters.demoted++;
      await this.balance();
    } else {
      this.index.remove(variant.id);
      this.counters.evicted++;
    }
    return blocks;
  }

  /** Writes a variant to the disk tier; false when there is none, it refuses (too large) or fails (logged). */
  private async writeDisk(variant: ChunkVariant, data: KvData): Promise<boolean> {
    if (this.disk === null) return false;
    try {
      return await this.disk.write(variant.id, data, storedMeta(variant));
    } catch (error) {
      this.options.log?.(`ctxr: chunk cache ${variant.id} could not be written to disk: ${(error as Error).message}`);
      return false;
    }
  }

  /** The variant with the lowest frequency-reuse (oldest use on ties) among ids. */
  private lowest(ids: readonly string[]): ChunkVariant | null {
    let best: ChunkVariant | null = null;
    for (const id of ids) {
      const variant = this.index.get(id);
      if (variant === undefined) continue;
      if (best === null || variant.frequencyReuse < best.frequencyReuse || (variant.frequencyReuse === best.frequencyReuse && variant.lastUsedAt < best.lastUsedAt)) best = variant;
    }
    return best;
  }

  /** Forgets a variant in every tier. */
  private async drop(variant: ChunkVariant): Promise<void> {
    this.index.remove(variant.id);
    const table = this.device.get(variant.id);
    if (table !== undefined) {
      this.device.delete(variant.id);
      await this.blocks.release([table]);
    }
    this.host.delete(variant.id);
    this.fromRemote.delete(variant.id);
    if (this.disk?.has(variant.id)) await this.disk.delete(variant.id);
    this.counters.evicted++;
  }
}

/** The sliding table of a range, when the sequence has one. */
function slidingTableOf(sliding: { table: readonly number[] } | undefined): { slidingTable?: readonly number[] } {
  return sliding === undefined ? {} : { slidingTable: sliding.table };
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export function storedMeta(variant: ChunkVariant): StoredVariantMeta {
  return {
    chunkHash: variant.chunkHash,
    tokenCount: variant.tokenCount,
    prefix: variant.prefix,
    exact: variant.exact,
    cci: variant.meta.cci,
    interByPrefix: variant.meta.interByPrefix,
    tokenInter: Array.from(variant.meta.tokenInter),
    ...(variant.meta.tokenShift !== undefined ? { tokenShift: Array.from(variant.meta.tokenShift) } : {}),
    frequencyReuse: variant.frequencyReuse,
  };
}

function variantFromStored(id: string, stored: StoredVariantMeta, tokenBytes: number): ChunkVariant {
  const now = Date.now();
  const meta: VariantMetadata = { prefix: stored.prefix, interByPrefix: stored.interByPrefix, cci: stored.cci, tokenInter: Float32Array.from(stored.tokenInter) };
  if (stored.tokenShift !== undefined) meta.tokenShift = Float32Array.from(stored.tokenShift);
  return {
    id,
    chunkHash: stored.chunkHash,
    tokenCount: stored.tokenCount,
    prefix: stored.prefix,
    exact: stored.exact,
    meta,
    frequencyReuse: stored.frequencyReuse,
    bytes: stored.tokenCount * tokenBytes,
    createdAt: now,
    lastUsedAt: now,
  };
}
