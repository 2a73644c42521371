/**
 * The Redis adapter against a real redis-server, on whichever runtime runs the tests (Bun's
 * built-in client under bun test, our RESP3 client under deno test): the reply shapes the shared
 * state and the remote KV tier read.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { redisConnection, type RedisConnection } from "../../src/runtime/redisClient.ts";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.ts";

let server: RedisServer;
const connections: RedisConnection[] = [];

beforeAll(async () => {
  server = await startRedisServer({ extraArgs: ["--requirepass", "s3cret"], password: "s3cret" });
});

afterAll(async () => {
  for (const connection of connections) connection.close();
  await server.stop();
});

function connection(url = `redis://:s3cret@127.0.0.1:${server.port}`): RedisConnection {
  const made = redisConnection(url, { connectionTimeout: 2_000 });
  connections.push(made);
  return made;
}

describe("redisConnection", () => {
  test("connects with the URL's password; strings, integers, nulls and bytes come back as Bun's client gives them", async () => {
    const redis = connection();
    expect(redis.connected).toBe(false);
    await redis.connect();
    expect(redis.connected).toBe(true);
    expect(await redis.send("SET", ["k", "välue"])).toBe("OK");
    expect(await redis.send("GET", ["k"])).toBe("välue");
    expect(await redis.send("GET", ["missing"])).toBeNull();
    expect(await redis.send("INCRBY", ["n", "41"])).toBe(41);
    const bytes = Uint8Array.of(0, 255, 13, 10, 7);
    await redis.send("SET", ["b", bytes]);
    expect(Array.from((await redis.getBuffer("b"))!)).toEqual([0, 255, 13, 10, 7]);
    expect(await redis.getBuffer("missing")).toBeNull();
  });

  test("streams: XADD ids, XRANGE entries as arrays, XREAD and XINFO as objects", async () => {
    const redis = connection();
    await redis.connect();
    const id = (await redis.send("XADD", ["s", "*", "o", "me", "d", "[1]"])) as string;
    expect(id).toMatch(/^\d+-\d+$/);
    expect(await redis.send("XRANGE", ["s", "-", "+"])).toEqual([[id, ["o", "me", "d", "[1]"]]]);
    expect(await redis.send("XREAD", ["COUNT", "10", "STREAMS", "s", "0-0"])).toEqual({ s: [[id, ["o", "me", "d", "[1]"]]] });
    expect(await redis.send("XREAD", ["COUNT", "10", "BLOCK", "50", "STREAMS", "s", id])).toBeNull();
    const info = (await redis.send("XINFO", ["STREAM", "s"])) as Record<string, unknown>;
    expect(info.length).toBe(1);
    expect(info["first-entry"]).toEqual([id, ["o", "me", "d", "[1]"]]);
  });

  test("many commands in flight are answered in order", async () => {
    const redis = connection();
    await redis.connect();
    const replies = await Promise.all(Array.from({ length: 200 }, (_, i) => redis.send("ECHO", [`m${i}`])));
    expect(replies).toEqual(Array.from({ length: 200 }, (_, i) => `m${i}`));
  });

  test("an error reply rejects that command only; a wrong password or a closed port fails connect", async () => {
    const redis = connection();
    await redis.connect();
    await expect(redis.send("NOSUCHCOMMAND", [])).rejects.toThrow(/unknown command/i);
    expect(await redis.send("PING", [])).toBe("PONG");
    await expect(connection(`redis://:wrong@127.0.0.1:${server.port}`).connect()).rejects.toThrow();
    await expect(connection(`redis://127.0.0.1:1`).connect()).rejects.toThrow();
  });

  test("a connection the server drops is reported by onclose, and commands on it are refused", async () => {
    const redis = connection();
    await redis.connect();
    const closed = new Promise<Error>((resolve) => (redis.onclose = resolve));
    const killer = connection();
    await killer.connect();
    expect(await killer.send("CLIENT", ["KILL", "TYPE", "normal", "SKIPME", "yes"])).toBeGreaterThanOrEqual(1);
    await closed;
    expect(redis.connected).toBe(false);
    await expect(redis.send("PING", [])).rejects.toThrow();
  });
});
