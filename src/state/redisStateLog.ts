/**
 * The shared log in Redis: a Stream of change batches (each entry: the writing instance, its
 * batch number and the batch's changes as JSON), a snapshot of the whole state with the id of
 * the last entry it covers, and a short-lived lock so that one instance at a time writes the
 * snapshot. Two connections: one for writes and reads, one that blocks on XREAD for the tail.
 * Both refuse commands while disconnected (no offline queue): the caller decides what waits.
 */
import type { RedisUrl } from "./redisUrl.ts";
import type { SharedChange } from "./sharedChange.ts";
import { withinMs } from "./timeLimit.ts";

/** One append: an instance's batches `first..n` (consecutive numbers), their changes in order. */
export interface LogEntry {
  id: string;
  origin: string;
  first: number;
  n: number;
  changes: SharedChange[];
}

export interface StoredSnapshot<S> {
  /** The last log entry the state covers ("0-0": none). */
  id: string;
  state: S;
}

export interface StateLogKeys {
  log: string;
  snapshot: string;
  snapshotLock: string;
}

export function stateLogKeys(prefix: string): StateLogKeys {
  return { log: `${prefix}:log`, snapshot: `${prefix}:snapshot`, snapshotLock: `${prefix}:snapshot-lock` };
}

/** Milliseconds to connect, and for a command to answer, before Redis counts as unreachable. */
const CONNECT_TIMEOUT_MS = 2_000;
const COMMAND_TIMEOUT_MS = 2_000;
/** Snapshots can be large: their reads and writes get longer. */
const SNAPSHOT_TIMEOUT_MS = 30_000;

export class RedisStateLog {
  private readonly writer: Bun.RedisClient;
  private readonly tail: Bun.RedisClient;
  readonly keys: StateLogKeys;

  constructor(
    readonly url: RedisUrl,
    prefix: string,
  ) {
    // Reconnecting is ours (ensureConnected before each command), so a command never waits in a queue.
    const options = { enableOfflineQueue: false, autoReconnect: false, connectionTimeout: CONNECT_TIMEOUT_MS };
    this.writer = new Bun.RedisClient(url.url, options);
    this.tail = new Bun.RedisClient(url.url, options);
    this.keys = stateLogKeys(prefix);
  }

  /** Appends batches first..n as one entry; resolves with its id once Redis has it. */
  async append(origin: string, first: number, n: number, changes: SharedChange[]): Promise<string> {
    const fields = ["o", origin, "f", String(first), "n", String(n), "d", JSON.stringify(changes)];
    return this.command<string>(this.writer, COMMAND_TIMEOUT_MS, "XADD", [this.keys.log, "*", ...fields]);
  }

  /** Entries after `afterId`, oldest first, at most `count`. */
  async readAfter(afterId: string, count: number): Promise<LogEntry[]> {
    const reply = await this.command<RawEntry[]>(this.writer, COMMAND_TIMEOUT_MS, "XRANGE", [this.keys.log, `(${afterId}`, "+", "COUNT", String(count)]);
    return reply.map(parseEntry);
  }

  /** Entries after `afterId`, waiting up to `blockMs` for one (on the tail connection). */
  async waitAfter(afterId: string, blockMs: number, count: number): Promise<LogEntry[]> {
    const args = ["COUNT", String(count), "BLOCK", String(blockMs), "STREAMS", this.keys.log, afterId];
    const reply = await this.command<Record<string, RawEntry[]> | null>(this.tail, blockMs + COMMAND_TIMEOUT_MS, "XREAD", args);
    if (reply === null) return [];
    return (reply[this.keys.log] ?? []).map(parseEntry);
  }

  /** The highest entry id trimmed away so far ("0-0": none), to tell whether a reader missed entries. */
  async maxDeletedId(): Promise<string> {
    try {
      const info = await this.command<Record<string, unknown>>(this.writer, COMMAND_TIMEOUT_MS, "XINFO", ["STREAM", this.keys.log]);
      return String(info["max-deleted-entry-id"] ?? "0-0");
    } catch (error) {
      if (/no such key/i.test(String(error))) return "0-0";
      throw error;
    }
  }

  async readSnapshot<S>(): Promise<StoredSnapshot<S> | null> {
    const text = await this.command<string | null>(this.writer, SNAPSHOT_TIMEOUT_MS, "GET", [this.keys.snapshot]);
    if (text === null) return null;
    const parsed = JSON.parse(text) as StoredSnapshot<S>;
    if (typeof parsed?.id !== "string" || parsed.state === undefined) throw new Error(`${this.keys.snapshot} in Redis is not a ctxr state snapshot`);
    return parsed;
  }

  /**
   * Writes a snapshot covering entries up to `id` if this instance gets the snapshot lock, then
   * trims the log behind the previous snapshot (kept, with its tail, for instances still
   * loading it). Returns false when another instance holds the lock.
   */
  async writeSnapshot<S>(origin: string, snapshot: StoredSnapshot<S>): Promise<boolean> {
    const locked = await this.command<string | null>(this.writer, COMMAND_TIMEOUT_MS, "SET", [this.keys.snapshotLock, origin, "NX", "PX", String(SNAPSHOT_TIMEOUT_MS * 2)]);
    if (locked !== "OK") return false;
    try {
      const previous = await this.command<string | null>(this.writer, SNAPSHOT_TIMEOUT_MS, "GET", [this.keys.snapshot]);
      const previousId = previous === null ? null : ((JSON.parse(previous) as { id?: unknown }).id as string | undefined);
      await this.command(this.writer, SNAPSHOT_TIMEOUT_MS, "SET", [this.keys.snapshot, JSON.stringify(snapshot)]);
      if (typeof previousId === "string" && previousId !== "0-0") await this.command(this.writer, SNAPSHOT_TIMEOUT_MS, "XTRIM", [this.keys.log, "MINID", previousId]);
      return true;
    } finally {
      await this.command(this.writer, COMMAND_TIMEOUT_MS, "DEL", [this.keys.snapshotLock]).catch(() => {});
    }
  }

  close(): void {
    this.writer.close();
    this.tail.close();
  }

  private async ensureConnected(client: Bun.RedisClient): Promise<void> {
    if (!client.connected) await client.connect();
  }

  /** A command on `client` that must answer within `ms` (a hung server counts as unreachable: the connection is dropped). */
  private async command<T>(client: Bun.RedisClient, ms: number, name: string, args: string[]): Promise<T> {
    await this.ensureConnected(client);
    return (await withinMs(client.send(name, args), ms, () => {
      client.close();
      return new Error(`Redis did not answer ${name} within ${ms} ms`);
    })) as T;
  }
}

type RawEntry = [id: string, fields: string[]];

function parseEntry([id, fields]: RawEntry): LogEntry {
  const values = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) values.set(fields[i]!, fields[i + 1]!);
  const origin = values.get("o");
  const first = Number(values.get("f"));
  const n = Number(values.get("n"));
  const data = values.get("d");
  if (origin === undefined || !Number.isSafeInteger(first) || !Number.isSafeInteger(n) || data === undefined) throw new Error(`shared log entry ${id} is not a ctxr change batch`);
  return { id, origin, first, n, changes: JSON.parse(data) as SharedChange[] };
}
