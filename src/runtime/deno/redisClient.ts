import type { RedisConnection, RedisConnectionOptions } from "../redisClient.ts";

const UNSUPPORTED = "Redis (--state, --kv-remote) needs Bun's built-in client: it is not available under Deno yet";

export function denoRedisConnection(_url: string, _options: RedisConnectionOptions): RedisConnection {
  const refuse = () => Promise.reject(new Error(UNSUPPORTED));
  return { connected: false, connect: refuse, close: () => {}, onclose: null, send: refuse, getBuffer: refuse };
}
