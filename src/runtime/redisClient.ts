/**
 * A Redis connection: Bun's built-in client (RESP3: map replies come back as objects) on Bun;
 * on Deno, which has none, a small RESP3 client of ours with the same reply shapes.
 */
import { bunRedisConnection } from "./bun/redisClient.ts";
import { denoRedisConnection } from "./deno/redisClient.ts";
import { runtimeName } from "./runtimeName.ts";
import type { RedisConnection, RedisConnectionOptions } from "./redisClientTypes.ts";
export type { RedisConnection, RedisConnectionOptions } from "./redisClientTypes.ts";

/** A connection that queues nothing while offline and never reconnects by itself (its owner does). */
export const redisConnection: (url: string, options: RedisConnectionOptions) => RedisConnection = runtimeName === "bun" ? bunRedisConnection : denoRedisConnection;
