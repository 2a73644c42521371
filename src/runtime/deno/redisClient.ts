/**
 * A Redis connection for Deno (which has no built-in client): RESP3 over Deno.connect or
 * Deno.connectTls, one command pipeline, replies in Bun's shapes (bulk strings as text, maps as
 * objects; getBuffer as bytes). Like the Bun client as ctxr configures it, it queues nothing while
 * offline and never reconnects by itself.
 */
import type { RedisConnection, RedisConnectionOptions } from "../redisClientTypes.ts";
import { deno, type DenoConn } from "./denoApi.ts";
import { encodeCommand, RespError, RespReader, withText, type RespValue } from "./respReader.ts";

interface Pending {
  resolve(value: RespValue): void;
  reject(error: Error): void;
  raw: boolean;
}

class DenoRedisConnection implements RedisConnection {
  connected = false;
  onclose: ((error: Error) => void) | null = null;
  private conn: DenoConn | null = null;
  private readonly pending: Pending[] = [];
  private connecting: Promise<void> | null = null;

  constructor(
    private readonly url: URL,
    private readonly options: RedisConnectionOptions,
  ) {}

  connect(): Promise<void> {
    this.connecting ??= this.open().finally(() => (this.connecting = null));
    return this.connecting;
  }

  private async open(): Promise<void> {
    if (this.connected) return;
    const hostname = this.url.hostname.replace(/^\[|\]$/g, "");
    const port = Number(this.url.port || 6379);
    const tls = this.url.protocol === "rediss:" || this.options.tls !== undefined && this.options.tls !== false;
    const ca = typeof this.options.tls === "object" ? [this.options.tls.ca] : undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`Connection timeout after ${this.options.connectionTimeout} ms`)), this.options.connectionTimeout)));
    const opening = tls ? deno().connectTls({ hostname, port, caCerts: ca }) : deno().connect({ hostname, port });
    try {
      this.conn = await Promise.race([opening, timeout]);
    } catch (error) {
      opening.then((conn) => conn.close()).catch(() => {});
      throw Object.assign(new Error(`Connection has failed: ${(error as Error).message}`), { code: "ERR_REDIS_CONNECTION_CLOSED" });
    } finally {
      clearTimeout(timer);
    }
    this.connected = true;
    void this.readLoop(this.conn);
    const user = decodeURIComponent(this.url.username);
    const password = decodeURIComponent(this.url.password);
    const hello = password !== "" ? ["HELLO", "3", "AUTH", user || "default", password] : ["HELLO", "3"];
    try {
      await this.send(hello[0]!, hello.slice(1));
      const db = this.url.pathname.replace(/^\//, "");
      if (db !== "" && db !== "0") await this.send("SELECT", [db]);
    } catch (error) {
      this.close();
      throw error;
    }
  }

  private async readLoop(conn: DenoConn): Promise<void> {
    const reader = new RespReader();
    const chunk = new Uint8Array(64 * 1024);
    let failure: Error = new Error("Connection closed");
    try {
      for (;;) {
        const count = await conn.read(chunk);
        if (count === null) break;
        reader.push(chunk.subarray(0, count));
        for (let reply = reader.next(); reply !== undefined; reply = reader.next()) {
          const waiting = this.pending.shift();
          if (waiting === undefined) continue;
          if (reply instanceof RespError) waiting.reject(new Error(reply.message));
          else waiting.resolve(waiting.raw ? reply : withText(reply));
        }
      }
    } catch (error) {
      failure = new Error(`Connection closed: ${(error as Error).message}`);
    }
    this.dropped(conn, failure);
  }

  private dropped(conn: DenoConn, error: Error): void {
    if (this.conn !== conn) return;
    this.conn = null;
    this.connected = false;
    Object.assign(error, { code: "ERR_REDIS_CONNECTION_CLOSED" });
    for (const waiting of this.pending.splice(0)) waiting.reject(error);
    try {
      conn.close();
    } catch {
      // Already closed.
    }
    this.onclose?.(error);
  }

  close(): void {
    if (this.conn !== null) this.dropped(this.conn, new Error("Connection closed"));
  }

  send(command: string, args: (string | Uint8Array)[]): Promise<unknown> {
    return this.request([command, ...args], false);
  }

  async getBuffer(key: string): Promise<Uint8Array | null> {
    return (await this.request(["GET", key], true)) as Uint8Array | null;
  }

  private request(parts: (string | Uint8Array)[], raw: boolean): Promise<RespValue> {
    const conn = this.conn;
    if (conn === null) return Promise.reject(Object.assign(new Error("Connection closed"), { code: "ERR_REDIS_CONNECTION_CLOSED" }));
    return new Promise<RespValue>((resolve, reject) => {
      this.pending.push({ resolve, reject, raw });
      writeAll(conn, encodeCommand(parts)).catch((error) => this.dropped(conn, new Error(`Connection closed: ${(error as Error).message}`)));
    });
  }
}

/** Writes of one connection, in order (a write may take several calls). */
const writeQueues = new WeakMap<DenoConn, Promise<void>>();

function writeAll(conn: DenoConn, bytes: Uint8Array): Promise<void> {
  const previous = writeQueues.get(conn) ?? Promise.resolve();
  const next = previous.then(async () => {
    for (let at = 0; at < bytes.length; ) at += await conn.write(bytes.subarray(at));
  });
  writeQueues.set(conn, next.catch(() => {}));
  return next;
}

export function denoRedisConnection(url: string, options: RedisConnectionOptions): RedisConnection {
  return new DenoRedisConnection(new URL(url), options);
}
