/**
 * The shared log in Redis: a Stream of change batches (each entry: the writing instance, its
 * batch number and the batch's changes as JSON), a snapshot of the whole state with the id of
 * the last entry it covers, and a short-lived lock so that one instance at a time writes the
 * snapshot. Two connections: one for writes and reads, one that blocks on XREAD for the tail.
 * Both refuse commands while disconnected (no offline queue): the caller decides what waits.
 */
import { diagnoseRedisConnection, isConnectionFailure, redisTlsOption, type RedisTlsSettings } from "./redisDiagnosis.ts";
import type { RedisUrl } from "./redisUrl.ts";
import { decodeLogEntry, decodeSnapshot, type DecodedEntry, type SharedSnapshotState, type StoredSnapshot } from "./sharedLogSchema.ts";
import { withinMs } from "./timeLimit.ts";
import { redisConnection, type RedisConnection } from "../runtime/redisClient.ts";

export interface StateLogKeys {
  log: string;
  snapshot: string;
  /** The id the snapshot covers through, beside it (cheap to read: tells a loader whether a newer snapshot came). */
  snapshotId: string;
  snapshotLock: string;
}

/**
 * A log entry as Redis returned it, not decoded yet: the reader decodes entry by entry (see
 * decodeStoredEntry), so that a page of large entries is never parsed in one go.
 */
export interface StoredEntry {
  id: string;
  /** Field names and values, alternating (anything, as written by whoever wrote it). */
  fields: unknown;
}

/** What the snapshot key holds. */
export type SnapshotRead = { kind: "none" } | { kind: "ok"; snapshot: StoredSnapshot<SharedSnapshotState> } | { kind: "garbage"; reason: string };

/** Redis's own default proto-max-bulk-len (512 MB), assumed when CONFIG GET is not allowed. */
export const DEFAULT_PROTO_MAX_BULK_LEN = 512 * 2 ** 20;

export function stateLogKeys(prefix: string): StateLogKeys {
  return { log: `${prefix}:log`, snapshot: `${prefix}:snapshot`, snapshotId: `${prefix}:snapshot-id`, snapshotLock: `${prefix}:snapshot-lock` };
}

/** Milliseconds to connect, and for a command to answer, before Redis counts as unreachable. */
const CONNECT_TIMEOUT_MS = 2_000;
const COMMAND_TIMEOUT_MS = 2_000;
/** Snapshots can be large: their reads and writes get longer. */
const SNAPSHOT_TIMEOUT_MS = 30_000;
/** How often, at most, a failed connection is probed for its reason. */
const DIAGNOSIS_EVERY_MS = 5_000;

export class RedisStateLog {
  private readonly writer: RedisConnection;
  private readonly tail: RedisConnection;
  readonly keys: StateLogKeys;

  private diagnosis: { at: number; reason: Promise<string | null> } | null = null;

  constructor(
    readonly url: RedisUrl,
    prefix: string,
    private readonly tls?: RedisTlsSettings,
  ) {
    // Reconnecting is ours (ensureConnected before each command), so a command never waits in a queue.
    const options = { connectionTimeout: CONNECT_TIMEOUT_MS, ...redisTlsOption(url, tls) };
    this.writer = redisConnection(url.url, options);
    this.tail = redisConnection(url.url, options);
    this.keys = stateLogKeys(prefix);
  }

  /** Appends batches first..n as one entry (`changes`: their changes as one JSON array); resolves with its id once Redis has it. */
  async append(origin: string, first: number, n: number, changes: string): Promise<string> {
    const fields = ["o", origin, "f", String(first), "n", String(n), "d", changes];
    return this.command<string>(this.writer, COMMAND_TIMEOUT_MS, "XADD", [this.keys.log, "*", ...fields]);
  }

  /** Entries after `afterId`, oldest first, at most `count`. */
  async readAfter(afterId: string, count: number): Promise<StoredEntry[]> {
    const reply = await this.command<RawEntry[]>(this.writer, COMMAND_TIMEOUT_MS, "XRANGE", [this.keys.log, `(${afterId}`, "+", "COUNT", String(count)]);
    return reply.map(storedEntry);
  }

  /** Entries after `afterId`, waiting up to `blockMs` for one (on the tail connection). */
  async waitAfter(afterId: string, blockMs: number, count: number): Promise<StoredEntry[]> {
    const args = ["COUNT", String(count), "BLOCK", String(blockMs), "STREAMS", this.keys.log, afterId];
    const reply = await this.command<Record<string, RawEntry[]> | null>(this.tail, blockMs + COMMAND_TIMEOUT_MS, "XREAD", args);
    if (reply === null) return [];
    return (reply[this.keys.log] ?? []).map(storedEntry);
  }

  /** What tells a reader whether entries after it were removed (logGap.ts): the highest removed id, the first entry, the snapshot's id. */
  async streamShape(): Promise<{ maxDeletedId: string; firstId: string | null; snapshotId: string | null }> {
    const snapshotId = await this.snapshotId();
    try {
      const info = await this.command<Record<string, unknown>>(this.writer, COMMAND_TIMEOUT_MS, "XINFO", ["STREAM", this.keys.log]);
      const first = info["first-entry"];
      const firstId = Array.isArray(first) && typeof first[0] === "string" ? first[0] : null;
      return { maxDeletedId: String(info["max-deleted-entry-id"] ?? "0-0"), firstId, snapshotId };
    } catch (error) {
      if (/no such key/i.test(String(error))) return { maxDeletedId: "0-0", firstId: null, snapshotId };
      throw error;
    }
  }

  /** The id the current snapshot covers through, null when none is recorded (or it is not an id). */
  async snapshotId(): Promise<string | null> {
    const id = await this.command<string | null>(this.writer, COMMAND_TIMEOUT_MS, "GET", [this.keys.snapshotId]);
    return typeof id === "string" && /^\d+-\d+$/.test(id) ? id : null;
  }

  /** The snapshot, checked whole: none, one, or garbage (with what is wrong). Connection failures throw. */
  async readSnapshot(): Promise<SnapshotRead> {
    const text = await this.command<string | null>(this.writer, SNAPSHOT_TIMEOUT_MS, "GET", [this.keys.snapshot]);
    if (text === null) return { kind: "none" };
    try {
      return { kind: "ok", snapshot: decodeSnapshot(String(text)) };
    } catch (error) {
      return { kind: "garbage", reason: (error as Error).message };
    }
  }

  /** Whether the snapshot key still starts as a snapshot covering `id` (a cheap check: its first bytes). */
  async snapshotLooksWhole(id: string): Promise<boolean> {
    const head = `{"id":${JSON.stringify(id)},"state":`;
    const text = await this.command<string | null>(this.writer, COMMAND_TIMEOUT_MS, "GETRANGE", [this.keys.snapshot, "0", String(head.length - 1)]);
    return text === head;
  }

  /** Redis's largest bulk string (proto-max-bulk-len), or its default when CONFIG is not allowed. */
  async maxBulkBytes(): Promise<number> {
    try {
      const reply = await this.command<unknown>(this.writer, COMMAND_TIMEOUT_MS, "CONFIG", ["GET", "proto-max-bulk-len"]);
      const value = Array.isArray(reply) ? reply[1] : (reply as Record<string, unknown> | null)?.["proto-max-bulk-len"];
      const bytes = Number(value);
      return Number.isSafeInteger(bytes) && bytes > 0 ? bytes : DEFAULT_PROTO_MAX_BULK_LEN;
    } catch (error) {
      if (isConnectionFailure(error) || /did not answer/.test(String(error))) throw error;
      return DEFAULT_PROTO_MAX_BULK_LEN;
    }
  }

  /**
   * Writes a snapshot covering entries up to `id` if this instance gets the snapshot lock, then
   * trims the log behind the previous snapshot (kept, with its tail, for instances still
   * loading it). Returns false when another instance holds the lock.
   */
  async writeSnapshot(origin: string, snapshot: StoredSnapshot<SharedSnapshotState>): Promise<boolean> {
    const locked = await this.command<string | null>(this.writer, COMMAND_TIMEOUT_MS, "SET", [this.keys.snapshotLock, origin, "NX", "PX", String(SNAPSHOT_TIMEOUT_MS * 2)]);
    if (locked !== "OK") return false;
    try {
      // The log is trimmed behind the previous snapshot only when its id is known (an unreadable one trims nothing).
      const previousId = await this.snapshotId();
      await this.command(this.writer, SNAPSHOT_TIMEOUT_MS, "SET", [this.keys.snapshot, JSON.stringify(snapshot)]);
      await this.command(this.writer, COMMAND_TIMEOUT_MS, "SET", [this.keys.snapshotId, snapshot.id]);
      if (previousId !== null && previousId !== "0-0") await this.command(this.writer, SNAPSHOT_TIMEOUT_MS, "XTRIM", [this.keys.log, "MINID", previousId]);
      return true;
    } finally {
      await this.command(this.writer, COMMAND_TIMEOUT_MS, "DEL", [this.keys.snapshotLock]).catch(() => {});
    }
  }

  close(): void {
    this.writer.close();
    this.tail.close();
  }

  /** Connects `client` if it is not; a failure is rethrown saying why in words (redisDiagnosis.ts). */
  private async ensureConnected(client: RedisConnection): Promise<void> {
    if (client.connected) return;
    try {
      await client.connect();
    } catch (error) {
      throw new Error(await this.whyUnreachable(error));
    }
  }

  /** The diagnosis of a failed connection (one probe per few seconds, shared by both connections). */
  private async whyUnreachable(error: unknown): Promise<string> {
    const fallback = `connecting to ${this.url.host}:${this.url.port} failed (${(error as Error)?.message ?? String(error)})`;
    if (this.diagnosis === null || Date.now() - this.diagnosis.at > DIAGNOSIS_EVERY_MS) {
      this.diagnosis = { at: Date.now(), reason: diagnoseRedisConnection(this.url, this.tls, CONNECT_TIMEOUT_MS).catch(() => null) };
    }
    return (await this.diagnosis.reason) ?? fallback;
  }

  /** A command on `client` that must answer within `ms` (a hung server counts as unreachable: the connection is dropped). */
  private async command<T>(client: RedisConnection, ms: number, name: string, args: string[]): Promise<T> {
    await this.ensureConnected(client);
    return (await withinMs(client.send(name, args), ms, () => {
      client.close();
      return new Error(`Redis did not answer ${name} within ${ms} ms`);
    })) as T;
  }
}

type RawEntry = [id: string, fields: unknown[]];

function storedEntry(raw: RawEntry): StoredEntry {
  return Array.isArray(raw) ? { id: String(raw[0]), fields: raw[1] ?? [] } : { id: "?", fields: [] };
}

/** Decodes a stored entry whole (sharedLogSchema.ts); `headerOnlyFor`: the reader's own instance, whose changes it already holds. */
export function decodeStoredEntry(stored: StoredEntry, headerOnlyFor?: string): DecodedEntry {
  return decodeLogEntry(stored.id, stored.fields as readonly unknown[], headerOnlyFor);
}
