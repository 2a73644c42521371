/**
 * A Redis connection: Bun's built-in client (RESP3: map replies come back as objects) on Bun;
 * on Deno, which has none, a small RESP3 client of ours with the same reply shapes.
 */
import { bunRedisConnection } from "./bun/redisClient.ts";
import { denoRedisConnection } from "./deno/redisClient.ts";
import { runtimeName } from "./runtimeName.ts";

export interface RedisConnection {
  readonly connected: boolean;
  connect(): Promise<void>;
  close(): void;
  onclose?: ((error: Error) => void) | null;
  send(command: string, args: (string | Uint8Array)[]): Promise<unknown>;
  getBuffer(key: string): Promise<Uint8Array | null>;
}

export interface RedisConnectionOptions {
  /** Milliseconds to connect. */
  connectionTimeout: number;
  /** rediss://: true, or the CA certificate (PEM) to trust. */
  tls?: boolean | { ca: string };
}

/** A connection that queues nothing while offline and never reconnects by itself (its owner does). */
export const redisConnection: (url: string, options: RedisConnectionOptions) => RedisConnection = runtimeName === "bun" ? bunRedisConnection : denoRedisConnection;
