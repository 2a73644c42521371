/**
 * The disk tier of the chunk caches (--kv-dir): one chunk-cache file
 * (kvCacheFile.ts) a variant, named after its key, with a capacity in bytes.
 * Like the host tier it only keeps count: overflowBytes() says how much must
 * leave and the caller chooses what.
 *
 * - Writes are atomic: the file is written under a temporary name in the same
 *   folder and renamed over the final one, so a reader or a crash sees the old
 *   file or the new one, never half of one. Files are not fsynced: after a power
 *   loss a renamed file may hold garbage, which its checksums reject.
 * - A read is one contiguous read of the whole file, checked in full (magic,
 *   header checksum, model identity, geometry, key, size, trailer checksum)
 *   before anything is used. A file that fails any check, or cannot be read, is
 *   deleted and its key forgotten, and read() throws a DiskKvError saying why:
 *   damaged KV is never returned.
 * - scan() rebuilds the index from the folder after a restart: it keeps the
 *   valid files (returning their keys and metadata), deletes damaged ones, files
 *   of another model or geometry, and temporary files left by an interrupted
 *   write, reporting each through `log`. Files that are not chunk-cache files
 *   are left alone. A folder is for one model: files of another are deleted.
 * - Operations on one key run one after another in the order called (a delete
 *   after a write removes what the write wrote); different keys run
 *   concurrently.
 */
import { createHash } from "node:crypto";
import { mkdirSync } from "node:fs";
import { open, readdir, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import { ByteBudgetedMap } from "../collections/byteBudgetedMap.ts";
import { temporaryTarget, writeAllAsync, writeFileAtomicallyAsync } from "../files/atomicFile.ts";
import type { KvData } from "../runner/runnerProtocol.ts";
import {
  DEFAULT_KV_PAGE_SIZE,
  type KvCacheExpectation,
  KvCacheFileError,
  type KvCacheFileLayout,
  type KvCacheFileProblem,
  KV_CACHE_PREAMBLE_BYTES,
  decodeKvCacheFile,
  encodeKvCacheFile,
  kvCacheHeaderEnd,
  readKvCacheFileHeader,
  verifyKvCacheFile,
} from "./kvCacheFile.ts";
import { readFileBytes } from "../runtime/files.ts";

/** The extension of chunk-cache files. */
export const KV_FILE_EXTENSION = ".ctxkv";
/** How much of the key's characters the file name shows. */
const NAME_PREFIX_CHARS = 80;
/** A header-only scan reads this much first (more when the header is larger). */
const SCAN_PREFIX_BYTES = 64 * 1024;

/**
 * The file name of a key: its safe characters (letters, digits, '_' and '-',
 * others as '_', at most 80) and 32 hex digits of its sha256, so that distinct
 * keys never share a file, even on case-insensitive file systems.
 */
export function kvFileName(key: string): string {
  const shown = key.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, NAME_PREFIX_CHARS) || "key";
  const digest = createHash("sha256").update(key, "utf8").digest("hex").slice(0, 32);
  return `${shown}.${digest}${KV_FILE_EXTENSION}`;
}

export type DiskKvProblem = KvCacheFileProblem | "io" | "missing";

/** A file that could not be used; it has been deleted and its key forgotten. */
export class DiskKvError extends Error {
  constructor(
    readonly key: string,
    readonly problem: DiskKvProblem,
    message: string,
  ) {
    super(message);
    this.name = "DiskKvError";
  }
}

/** What the tier knows of a file without reading it. */
export interface DiskKvEntry {
  key: string;
  /** The variant's metadata, as stored (a JSON copy of what was written). */
  meta: Record<string, unknown>;
  /** Tokens. */
  count: number;
  /** The file's size. */
  bytes: number;
}

export interface DiskKvRead extends DiskKvEntry {
  data: KvData;
}

export interface DiskKvTierOptions {
  /** The folder (created when missing). */
  dir: string;
  capacityBytes: number;
  /** modelIdentity(modelDir) of the model the KV belongs to. */
  modelIdentity: string;
  layers: number;
  kvWidth: number;
  /** Tokens a page in the files written (default 16). */
  pageSize?: number;
  /** Where scan() reports the files it discards. */
  log?: (line: string) => void;
}

export interface DiskKvScanOptions {
  /**
   * Check every file's payload checksum too (reads every file whole; the
   * default). When false only headers are read and checked (magic, header
   * checksum, model, geometry, key, size): payload damage is then found by read().
   */
  verifyPayload?: boolean;
}

function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | null)?.code;
}

export class DiskKvTier {
  readonly dir: string;
  readonly capacityBytes: number;
  private readonly expected: KvCacheExpectation;
  private readonly pageSize: number;
  private readonly log: (line: string) => void;
  private readonly entries: ByteBudgetedMap<DiskKvEntry>;
  /** The last operation queued for each key (operations on a key run in order). */
  private readonly queues = new Map<string, Promise<unknown>>();
  /** Names of the files being written now (scan leaves their temporary files alone). */
  private readonly writing = new Set<string>();

  constructor(options: DiskKvTierOptions) {
    this.entries = new ByteBudgetedMap<DiskKvEntry>(options.capacityBytes, "disk KV tier");
    this.dir = resolve(options.dir);
    this.capacityBytes = options.capacityBytes;
    this.expected = { modelIdentity: options.modelIdentity, layers: options.layers, kvWidth: options.kvWidth };
    this.pageSize = options.pageSize ?? DEFAULT_KV_PAGE_SIZE;
    this.log = options.log ?? (() => {});
    mkdirSync(this.dir, { recursive: true });
  }

  /** The path of a key's file. */
  pathOf(key: string): string {
    return join(this.dir, kvFileName(key));
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** What is known of a key's file (metadata, size), without reading it. */
  entry(key: string): DiskKvEntry | undefined {
    return this.entries.get(key);
  }

  /** The keys, least recently written first. */
  keys(): string[] {
    return this.entries.keys();
  }

  get size(): number {
    return this.entries.size;
  }

  /** The sum of the files' sizes. */
  get bytesUsed(): number {
    return this.entries.bytesUsed;
  }

  /** How many bytes must leave to be within capacity (0 when within). */
  overflowBytes(): number {
    return this.entries.overflowBytes();
  }

  /**
   * Writes (or replaces) a key's file atomically. Resolves true once the file is
   * in place, false (writing nothing, an older file of the key kept) when the file
   * alone would be larger than the capacity. Going over capacity is allowed (see
   * overflowBytes). Rejects with a KvCacheFileError when `data` does not have the
   * tier's geometry or `meta` is not a JSON object, with a DiskKvError (problem
   * "io") when the file system fails; nothing is changed then.
   */
  write(key: string, data: KvData, meta: object): Promise<boolean> {
    return this.serially(key, async () => {
      const bytes = encodeKvCacheFile(data, { ...this.expected, meta, key, pageSize: this.pageSize });
      if (!this.entries.fits(bytes.length)) return false;
      const name = kvFileName(key);
      this.writing.add(name);
      try {
        // Not durable: a cache file lost or emptied by a power cut fails its checks and is dropped.
        await writeFileAtomicallyAsync(join(this.dir, name), (fd) => writeAllAsync(fd, bytes), { durable: false });
      } catch (error) {
        throw new DiskKvError(key, "io", `cannot write ${name}: ${(error as Error).message}`);
      } finally {
        this.writing.delete(name);
      }
      this.remember({ key, meta: JSON.parse(JSON.stringify(meta)) as Record<string, unknown>, count: data.positions.length, bytes: bytes.length });
      return true;
    });
  }

  /**
   * Reads and checks a key's file. Resolves null when the key is not in the tier.
   * When the file is missing, unreadable, damaged or not for this model, geometry
   * or key, deletes it, forgets the key and rejects with a DiskKvError naming the
   * problem.
   */
  read(key: string): Promise<DiskKvRead | null> {
    return this.serially(key, async () => {
      if (!this.entries.has(key)) return null;
      const name = kvFileName(key);
      const path = join(this.dir, name);
      let bytes: Uint8Array;
      try {
        bytes = await readFileBytes(path);
      } catch (error) {
        const missing = errorCode(error) === "ENOENT";
        await this.discard(key, path);
        throw new DiskKvError(key, missing ? "missing" : "io", `${name}: ${missing ? "file missing" : `cannot read: ${(error as Error).message}`}`);
      }
      try {
        const decoded = decodeKvCacheFile(bytes, { ...this.expected, key });
        return { key, meta: decoded.meta, count: decoded.header.count, bytes: decoded.fileBytes, data: decoded.data };
      } catch (error) {
        await this.discard(key, path);
        if (error instanceof KvCacheFileError) throw new DiskKvError(key, error.problem, `${name}: ${error.message}`);
        throw error;
      }
    });
  }

  /** Deletes a key's file; resolves false when the key was not in the tier. */
  delete(key: string): Promise<boolean> {
    return this.serially(key, async () => {
      const known = this.entries.has(key);
      await this.discard(key, this.pathOf(key));
      return known;
    });
  }

  /**
   * Rebuilds the index from the folder (call at startup, before other
   * operations; it waits for those under way). Returns the valid files' entries;
   * deletes damaged files, files of another model, geometry or name, and stray
   * temporary files, saying so through `log`.
   */
  async scan(options: DiskKvScanOptions = {}): Promise<DiskKvEntry[]> {
    const verifyPayload = options.verifyPayload ?? true;
    await Promise.all([...this.queues.values()].map((queued) => queued.catch(() => {})));
    const found = new Map<string, DiskKvEntry>();
    const names = (await readdir(this.dir, { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const dirent of names) {
      const { name } = dirent;
      const path = join(this.dir, name);
      const target = temporaryTarget(name);
      if (target !== null && target.endsWith(KV_FILE_EXTENSION)) {
        if (this.writing.has(target)) continue;
        await rm(path, { force: true }).catch(() => {});
        this.log(`ctxr: chunk cache: removed the temporary file ${name} of an interrupted write`);
        continue;
      }
      if (!name.endsWith(KV_FILE_EXTENSION) || !dirent.isFile()) continue;
      try {
        const layout = verifyPayload ? verifyKvCacheFile(await readFileBytes(path), this.expected) : await this.readHeader(path);
        const key = layout.header.key;
        if (key === undefined) throw new KvCacheFileError("key", "the file has no key");
        if (kvFileName(key) !== name) throw new KvCacheFileError("key", `the file holds key ${JSON.stringify(key)}, whose file is ${kvFileName(key)}`);
        found.set(key, { key, meta: layout.header.meta, count: layout.header.count, bytes: layout.fileBytes });
      } catch (error) {
        await rm(path, { force: true }).catch(() => {});
        this.log(`ctxr: chunk cache file ${name} discarded: ${(error as Error).message}`);
      }
    }
    this.entries.clear();
    for (const entry of found.values()) this.remember(entry);
    return [...found.values()];
  }

  /** Reads and checks a file's header (and size) only. */
  private async readHeader(path: string): Promise<KvCacheFileLayout> {
    const handle = await open(path, "r");
    try {
      const fileBytes = (await handle.stat()).size;
      let prefix = new Uint8Array(Math.min(fileBytes, SCAN_PREFIX_BYTES));
      const first = await handle.read(prefix, 0, prefix.length, 0);
      prefix = prefix.subarray(0, first.bytesRead);
      if (prefix.length >= KV_CACHE_PREAMBLE_BYTES) {
        const headerEnd = kvCacheHeaderEnd(prefix);
        if (headerEnd > prefix.length && headerEnd <= fileBytes) {
          const whole = new Uint8Array(headerEnd);
          const more = await handle.read(whole, 0, headerEnd, 0);
          prefix = whole.subarray(0, more.bytesRead);
        }
      }
      return readKvCacheFileHeader(prefix, fileBytes, this.expected);
    } finally {
      await handle.close();
    }
  }

  private remember(entry: DiskKvEntry): void {
    this.entries.set(entry.key, entry);
  }

  private async discard(key: string, path: string): Promise<void> {
    this.entries.delete(key);
    // A file that cannot be deleted now is forgotten all the same; the next scan tries again.
    await rm(path, { force: true }).catch(() => {});
  }

  /** Runs `operation` after every operation on `key` queued before it. */
  private serially<T>(key: string, operation: () => Promise<T>): Promise<T> {
    const previous = this.queues.get(key) ?? Promise.resolve();
    const result = previous.then(operation, operation);
    const settled = result.catch(() => {});
    this.queues.set(key, settled);
    void settled.then(() => {
      if (this.queues.get(key) === settled) this.queues.delete(key);
    });
    return result;
  }
}
