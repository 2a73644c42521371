import type { RedisConnection, RedisConnectionOptions } from "../redisClient.ts";

export function bunRedisConnection(url: string, options: RedisConnectionOptions): RedisConnection {
  return new Bun.RedisClient(url, { enableOfflineQueue: false, autoReconnect: false, ...options }) as unknown as RedisConnection;
}
