import type { RedisConnection, RedisConnectionOptions } from "../redisClientTypes.ts";

export function bunRedisConnection(url: string, options: RedisConnectionOptions): RedisConnection {
  return new Bun.RedisClient(url, { enableOfflineQueue: false, autoReconnect: false, ...options }) as unknown as RedisConnection;
}
