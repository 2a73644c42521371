/**
 * The remote tier of the chunk caches (--kv-remote redis://HOST:PORT[/DB]): chunk variants shared
 * by every `ctxr serve --model` instance of the same model and KV settings through one Redis.
 *
 * Values are disk-tier files (kvCacheFile.ts: magic, checksums, the model's identity, the
 * variant's metadata), one Redis string a variant. Keys (all under one hash tag, so a Redis
 * Cluster would keep them in one slot; the scripts touch keys they derive):
 *
 *   ctxr:kv:{NS}:v:CHUNK:VARIANT   the file bytes (its header's key is this whole key)
 *   ctxr:kv:{NS}:c:CHUNK           set: the chunk's variant keys (how an instance finds them)
 *   ctxr:kv:{NS}:rank              sorted set: variant key → uses + lastUseMs / 2^42
 *   ctxr:kv:{NS}:sizes             hash: variant key → bytes
 *   ctxr:kv:{NS}:bytes             the sum of the sizes
 *
 * NS is remoteNamespace(): a digest of the model's identity and the runner settings that change
 * K/V (as the prefix cache's seed), so two models, or one model under other KV settings, never
 * share entries. CHUNK is the chunk's content hash (chunkHash.ts), VARIANT a digest of the
 * prefix it was computed after and its exactness: an instance that never saw a chunk finds other
 * instances' variants of it from its content alone.
 *
 * The byte limit is kept by Redis itself: the put script adds the value, its size and rank and
 * evicts, in the same atomic step, the lowest-ranked other variants (fewest remote uses, then
 * least recently used) until the namespace's total is within the limit, so all instances share
 * one accounting. A use (a remote hit) adds 1 and renews the time. An entry that fails any
 * check (checksum, identity, geometry, key, metadata) is deleted and counted, never used.
 *
 * The checksum catches damage, not forgery: anyone who can write to this Redis can write an entry
 * that passes it and steer answers. With `secret` (--kv-remote-secret) every value carries an
 * HMAC-SHA256 over its key and bytes (remoteEntryMac.ts); one that fails it is deleted and
 * counted (`unauthenticated`), never used.
 *
 * Failure: every operation has a short time limit; an unreachable or slow Redis is skipped
 * (lookups find nothing, writes are dropped), counted, and tried again after `retryMs`. Nothing
 * here throws to its caller.
 */
import { createHash } from "node:crypto";
import type { KvData } from "../runner/runnerProtocol.ts";
import { DEFAULT_KV_PAGE_SIZE, KvCacheFileError, decodeKvCacheFile, encodeKvCacheFile } from "./kvCacheFile.ts";
import type { RedisUrl } from "../state/redisUrl.ts";
import { withinMs } from "../state/timeLimit.ts";
import { redisTlsOption, type RedisTlsSettings } from "../state/redisDiagnosis.ts";
import { openRemoteEntry, sealRemoteEntry } from "./remoteEntryMac.ts";
import { redisConnection } from "../runtime/redisClient.ts";
import type { RedisConnection } from "../runtime/redisClientTypes.ts";

/** --kv-remote-bytes by default. */
export const DEFAULT_REMOTE_KV_BYTES = 4 * 2 ** 30;
/** A lookup (or a use) waits at most this long for Redis. */
export const DEFAULT_REMOTE_TIMEOUT_MS = 250;
/** A write (in the background) waits at most this long. */
export const DEFAULT_REMOTE_WRITE_TIMEOUT_MS = 5000;
/** After a failure, Redis is left alone this long before it is tried again. */
export const DEFAULT_REMOTE_RETRY_MS = 1000;

/** The lastUseMs scale of rank scores: 2^42 ms is 139 years, so the fraction stays below 1. */
const TIME_SCALE = 2 ** 42;

/** The namespace of a model and its KV settings: 32 hex digits. */
export function remoteNamespace(modelIdentity: string, settings: string): string {
  return createHash("sha256").update(`ctxr-remote-kv-v1\0${modelIdentity}\0${settings}`, "utf8").digest("hex").slice(0, 32);
}

/** The keys of one namespace (see the file comment). */
export class RemoteKvKeys {
  readonly root: string;
  constructor(readonly namespace: string) {
    this.root = `ctxr:kv:{${namespace}}`;
  }

  /** The variant of `chunkHash` computed after `prefix` (chunk hashes), exact or not. */
  variant(chunkHash: string, prefix: readonly string[], exact: boolean): string {
    const digest = createHash("sha256").update(JSON.stringify([exact, prefix]), "utf8").digest("hex").slice(0, 32);
    return `${this.root}:v:${chunkHash}:${digest}`;
  }

  chunk(chunkHash: string): string {
    return `${this.root}:c:${chunkHash}`;
  }

  get rank(): string {
    return `${this.root}:rank`;
  }

  get sizes(): string {
    return `${this.root}:sizes`;
  }

  get bytes(): string {
    return `${this.root}:bytes`;
  }
}

/** A rank score: fewer uses first, then the least recently used. */
export function rankScore(uses: number, nowMs: number): number {
  return uses + nowMs / TIME_SCALE;
}

/** The uses a rank score counts. */
export function usesOfScore(score: number): number {
  return Math.floor(score);
}

/*
 * The scripts. KEYS[1] the variant, KEYS[2] its chunk set, KEYS[3] rank, KEYS[4] sizes, KEYS[5]
 * bytes. A victim's chunk set is derived from its key: ROOT:v:CHUNK:VARIANT → ROOT:c:CHUNK.
 */
const REMOVE_LUA = `
local function chunkset(key)
  local at = string.find(key, ':v:', 1, true)
  local rest = string.sub(key, at + 3)
  local colon = string.find(rest, ':', 1, true)
  return string.sub(key, 1, at - 1) .. ':c:' .. string.sub(rest, 1, colon - 1)
end
local function remove(key)
  local size = tonumber(redis.call('HGET', KEYS[4], key) or '0')
  redis.call('DEL', key)
  redis.call('SREM', chunkset(key), key)
  redis.call('ZREM', KEYS[3], key)
  redis.call('HDEL', KEYS[4], key)
  if size > 0 then return redis.call('DECRBY', KEYS[5], size) end
  return tonumber(redis.call('GET', KEYS[5]) or '0')
end
`;

/** ARGV: value, limit, score. Returns {status, evicted, total}: status 0 too large, 1 stored, 2 there already. */
const PUT_LUA = `${REMOVE_LUA}
local size = string.len(ARGV[1])
local limit = tonumber(ARGV[2])
if size > limit then return {0, 0, tonumber(redis.call('GET', KEYS[5]) or '0')} end
if redis.call('HEXISTS', KEYS[4], KEYS[1]) == 1 and redis.call('EXISTS', KEYS[1]) == 1 then
  return {2, 0, tonumber(redis.call('GET', KEYS[5]) or '0')}
end
remove(KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], KEYS[1])
redis.call('ZADD', KEYS[3], ARGV[3], KEYS[1])
redis.call('HSET', KEYS[4], KEYS[1], size)
local total = redis.call('INCRBY', KEYS[5], size)
local evicted = 0
while total > limit do
  local lowest = redis.call('ZRANGE', KEYS[3], 0, 1)
  local victim = lowest[1]
  if victim == KEYS[1] then victim = lowest[2] end
  if not victim then break end
  total = remove(victim)
  evicted = evicted + 1
end
return {1, evicted, total}
`;

/** ARGV: the time fraction. A use: uses + 1, time renewed (nothing when the key is gone). */
const TOUCH_LUA = `
local score = redis.call('ZSCORE', KEYS[3], KEYS[1])
if not score then return 0 end
redis.call('ZADD', KEYS[3], math.floor(tonumber(score)) + 1 + tonumber(ARGV[1]), KEYS[1])
return 1
`;

/** Removes a variant from every structure. */
const DISCARD_LUA = `${REMOVE_LUA}
remove(KEYS[1])
return 1
`;

/** The Redis connection the tier uses (tests may pass their own). */
export type RemoteKvClient = RedisConnection;

export interface RemoteKvTierOptions {
  url: RedisUrl;
  capacityBytes: number;
  /** modelIdentity() of the model (checked in every entry's header). */
  modelIdentity: string;
  /** remoteNamespace(identity, KV settings). */
  namespace: string;
  layers: number;
  kvWidth: number;
  pageSize?: number;
  /** Per lookup or use (default DEFAULT_REMOTE_TIMEOUT_MS). */
  timeoutMs?: number;
  /** Per background write (default DEFAULT_REMOTE_WRITE_TIMEOUT_MS). */
  writeTimeoutMs?: number;
  /** After a failure, skip Redis this long (default DEFAULT_REMOTE_RETRY_MS). */
  retryMs?: number;
  /** Variants of one chunk a lookup reads at most (the highest ranked; default 4). */
  maxVariantsPerChunk?: number;
  log?: (line: string) => void;
  /** Authenticates entries with HMAC-SHA256 under this secret (--kv-remote-secret). */
  secret?: Uint8Array | null;
  /** TLS settings for rediss:// (--redis-ca). */
  tls?: RedisTlsSettings;
  /** For tests: the client to use instead of a Redis connection. */
  client?: RemoteKvClient;
}

/** A variant read back from Redis, checked. */
export interface RemoteKvEntry {
  key: string;
  meta: Record<string, unknown>;
  data: KvData;
  bytes: number;
}

export interface RemoteKvStats {
  /** Whether the last contact with Redis worked. */
  up: boolean;
  /** Lookups made (chunks asked for). */
  lookups: number;
  /** Variants read from Redis and found good. */
  found: number;
  /** Variants written. */
  writes: number;
  /** Writes refused (larger than the limit) or already there. */
  writesSkipped: number;
  /** Variants the put scripts evicted to keep the limit. */
  evicted: number;
  /** Damaged or foreign entries deleted (the unauthenticated ones included). */
  discarded: number;
  /** Entries deleted because their MAC was missing or wrong (with a secret). */
  unauthenticated: number;
  /** Whether entries are authenticated (a secret is configured). */
  authenticated: boolean;
  /** Operations that failed (unreachable, timed out, error replies). */
  failures: number;
  /** Operations not tried while Redis was down. */
  skipped: number;
  /** The namespace's bytes as the last write saw them. */
  bytes: number;
  capacityBytes: number;
}

class RemoteTimeoutError extends Error {}

export class RemoteKvTier {
  readonly keys: RemoteKvKeys;
  readonly capacityBytes: number;
  readonly display: string;
  private readonly client: RemoteKvClient;
  private readonly timeoutMs: number;
  private readonly writeTimeoutMs: number;
  private readonly retryMs: number;
  private readonly maxVariants: number;
  private readonly pageSize: number;
  private readonly log: (line: string) => void;
  private readonly counters = { lookups: 0, found: 0, writes: 0, writesSkipped: 0, evicted: 0, discarded: 0, unauthenticated: 0, failures: 0, skipped: 0, bytes: 0 };
  private up = true;
  /** Until when Redis is left alone after a failure (ms since the epoch). */
  private downUntil = 0;
  private connecting: Promise<boolean> | null = null;
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly pending = new Set<Promise<unknown>>();
  private closed = false;
  private readonly secret: Uint8Array | null;

  constructor(private readonly options: RemoteKvTierOptions) {
    this.secret = options.secret ?? null;
    if (!(options.capacityBytes >= 0)) throw new RangeError(`remote KV tier: bad capacity ${options.capacityBytes}`);
    this.keys = new RemoteKvKeys(options.namespace);
    this.capacityBytes = options.capacityBytes;
    this.display = options.url.display;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_REMOTE_TIMEOUT_MS;
    this.writeTimeoutMs = options.writeTimeoutMs ?? DEFAULT_REMOTE_WRITE_TIMEOUT_MS;
    this.retryMs = options.retryMs ?? DEFAULT_REMOTE_RETRY_MS;
    this.maxVariants = options.maxVariantsPerChunk ?? 4;
    this.pageSize = options.pageSize ?? DEFAULT_KV_PAGE_SIZE;
    this.log = options.log ?? (() => {});
    this.client =
      options.client ??
      redisConnection(options.url.url, {
        connectionTimeout: Math.max(this.timeoutMs, 500),
        ...redisTlsOption(options.url, options.tls),
      });
    // A dropped connection is noticed at once and reconnected in the background.
    this.client.onclose = () => {
      if (!this.closed) this.scheduleReconnect();
    };
  }

  get stats(): RemoteKvStats {
    return { up: this.up, ...this.counters, authenticated: this.secret !== null, capacityBytes: this.capacityBytes };
  }

  /** Connects at start (a failure is counted and retried later, like any other). */
  async start(): Promise<boolean> {
    return this.ready(true);
  }

  /**
   * The checked variants of a chunk (at most maxVariantsPerChunk, the highest ranked), none
   * when Redis is unreachable or slow. Damaged or foreign entries are deleted and counted.
   */
  async lookup(chunkHash: string): Promise<RemoteKvEntry[]> {
    if (!(await this.ready(false))) return [];
    this.counters.lookups++;
    let values: { key: string; bytes: Uint8Array | null }[];
    try {
      values = await this.limited(this.timeoutMs, async () => {
        let members = (await this.client.send("SMEMBERS", [this.keys.chunk(chunkHash)])) as string[] | null;
        members = Array.isArray(members) ? members.map(String) : [];
        if (members.length > this.maxVariants) {
          const scores = (await this.client.send("ZMSCORE", [this.keys.rank, ...members])) as (number | string | null)[];
          members = members
            .map((key, i) => ({ key, score: Number(scores[i] ?? -1) }))
            .sort((a, b) => b.score - a.score)
            .slice(0, this.maxVariants)
            .map((m) => m.key);
        }
        return Promise.all(members.map(async (key) => ({ key, bytes: await this.client.getBuffer(key) })));
      });
    } catch (error) {
      this.failed("lookup", error);
      return [];
    }
    this.reachable();
    const entries: RemoteKvEntry[] = [];
    for (const { key, bytes } of values) {
      if (bytes === null) {
        // Gone (evicted by Redis itself, or deleted): forget it, quietly.
        this.background(this.writeTimeoutMs, () => this.script(DISCARD_LUA, key, chunkHash, []));
        continue;
      }
      const entry = this.check(key, chunkHash, bytes);
      if (entry === null) continue;
      this.counters.found++;
      entries.push(entry);
    }
    return entries;
  }

  /** Decodes and checks an entry; deletes it (counted) when it fails. */
  private check(key: string, chunkHash: string, value: Uint8Array): RemoteKvEntry | null {
    try {
      let bytes = value;
      if (this.secret !== null) {
        const opened = openRemoteEntry(this.secret, key, value);
        if (opened instanceof Error) {
          this.counters.unauthenticated++;
          throw opened;
        }
        bytes = opened;
      }
      const decoded = decodeKvCacheFile(bytes, { modelIdentity: this.options.modelIdentity, layers: this.options.layers, kvWidth: this.options.kvWidth, key });
      const meta = decoded.meta;
      const prefix = meta.prefix;
      if (meta.chunkHash !== chunkHash || meta.tokenCount !== decoded.header.count || !Array.isArray(prefix) || !prefix.every((p) => typeof p === "string") || typeof meta.exact !== "boolean") {
        throw new KvCacheFileError("header", "its metadata does not describe this chunk");
      }
      if (this.keys.variant(chunkHash, prefix as string[], meta.exact) !== key) throw new KvCacheFileError("key", "its metadata belongs under another key");
      return { key, meta, data: decoded.data, bytes: decoded.fileBytes };
    } catch (error) {
      this.counters.discarded++;
      this.log(`ctxr: remote chunk cache entry ${key} discarded: ${(error as Error).message}`);
      this.background(this.writeTimeoutMs, () => this.script(DISCARD_LUA, key, chunkHash, []));
      return null;
    }
  }

  /**
   * Writes a variant in the background (never rejects); the returned promise says whether it
   * was stored. Variants already there are left as they are.
   */
  write(chunkHash: string, prefix: readonly string[], exact: boolean, data: KvData, meta: object): Promise<boolean> {
    const key = this.keys.variant(chunkHash, prefix, exact);
    return this.background(this.writeTimeoutMs, async () => {
      const file = encodeKvCacheFile(data, { modelIdentity: this.options.modelIdentity, layers: this.options.layers, kvWidth: this.options.kvWidth, meta, key, pageSize: this.pageSize });
      const bytes = this.secret === null ? file : sealRemoteEntry(this.secret, key, file);
      if (bytes.length > this.capacityBytes) {
        this.counters.writesSkipped++;
        return false;
      }
      const [status, evicted, total] = (await this.script(PUT_LUA, key, chunkHash, [bytes, String(this.capacityBytes), String(rankScore(0, Date.now()))])) as number[];
      this.counters.evicted += Number(evicted);
      this.counters.bytes = Number(total);
      if (Number(status) === 1) {
        this.counters.writes++;
        return true;
      }
      this.counters.writesSkipped++;
      return false;
    }).then((stored) => stored === true);
  }

  /** Counts a use of a variant (a remote hit): its rank's uses + 1, its time renewed. */
  touch(key: string): void {
    const chunkHash = key.slice(this.keys.root.length + 3).split(":")[0]!;
    void this.background(this.timeoutMs, () => this.script(TOUCH_LUA, key, chunkHash, [String(Date.now() / TIME_SCALE)]));
  }

  /** Resolves when the background operations started so far have ended. */
  async idle(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  async close(): Promise<void> {
    await this.idle();
    this.closed = true;
    if (this.reconnectTimer !== null) clearTimeout(this.reconnectTimer);
    try {
      this.client.close();
    } catch {
      // already closed
    }
  }

  private script(lua: string, key: string, chunkHash: string, args: (string | Uint8Array)[]): Promise<unknown> {
    return this.client.send("EVAL", [lua, "5", key, this.keys.chunk(chunkHash), this.keys.rank, this.keys.sizes, this.keys.bytes, ...args]);
  }

  /** Runs an operation in the background within `ms`; resolves with its value, or null when skipped or failed. */
  private background<T>(ms: number, operation: () => Promise<T>): Promise<T | null> {
    const run = (async (): Promise<T | null> => {
      if (!(await this.ready(true))) return null;
      try {
        const value = await this.limited(ms, operation);
        this.reachable();
        return value;
      } catch (error) {
        if (error instanceof KvCacheFileError) {
          this.log(`ctxr: remote chunk cache: ${error.message}`);
          return null;
        }
        this.failed("write", error);
        return null;
      }
    })();
    this.pending.add(run);
    void run.finally(() => this.pending.delete(run));
    return run;
  }

  /**
   * Whether Redis may be used now: connected, or (once the retry time has come) reconnected
   * within the time limit. A lookup, on a request's path, does not `wait` for a reconnection: it
   * starts one and is skipped, so a Redis that does not answer never holds a request up longer
   * than one lookup's time limit.
   */
  private async ready(wait: boolean): Promise<boolean> {
    if (this.closed) return false;
    if (Date.now() < this.downUntil) {
      this.counters.skipped++;
      return false;
    }
    if (this.client.connected) return true;
    const connecting = this.reconnect();
    if (!wait) {
      this.counters.skipped++;
      return false;
    }
    const ok = await connecting;
    if (!ok) this.counters.skipped++;
    return ok;
  }

  /** Starts a connection attempt unless one is under way. */
  private reconnect(): Promise<boolean> {
    this.connecting ??= (async () => {
      try {
        await this.limited(Math.max(this.timeoutMs, 500), () => this.client.connect());
        this.reachable();
        return true;
      } catch (error) {
        this.failed("connect", error);
        return false;
      } finally {
        this.connecting = null;
      }
    })();
    return this.connecting;
  }

  /** Tries to reconnect every retryMs until connected (so Redis is used again as soon as it is back). */
  private scheduleReconnect(): void {
    if (this.reconnectTimer !== null || this.closed) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (this.closed || this.client.connected) return;
      void this.reconnect();
    }, this.retryMs);
    (this.reconnectTimer as { unref?: () => void }).unref?.();
  }

  private reachable(): void {
    if (!this.up) this.log(`ctxr: remote chunk cache ${this.display} is reachable again`);
    this.up = true;
  }

  private failed(what: string, error: unknown): void {
    this.counters.failures++;
    this.downUntil = Date.now() + this.retryMs;
    if (!this.client.connected) this.scheduleReconnect();
    if (this.up) {
      const reason = error instanceof RemoteTimeoutError ? error.message : (error as Error)?.message ?? String(error);
      this.log(`ctxr: remote chunk cache ${this.display} skipped (${what}: ${reason}); trying again every ${this.retryMs} ms`);
    }
    this.up = false;
  }

  private limited<T>(ms: number, operation: () => Promise<T>): Promise<T> {
    return withinMs(operation(), ms, () => new RemoteTimeoutError(`no answer within ${ms} ms`));
  }
}
