import { describe, expect, test } from "bun:test";
import { parseRedisUrl } from "../../src/state/redisUrl.ts";

describe("parseRedisUrl", () => {
  test("host, port and database", () => {
    expect(parseRedisUrl("redis://10.0.0.5:6380/3", "--state")).toMatchObject({ host: "10.0.0.5", port: 6380, db: 3, tls: false });
    expect(parseRedisUrl("redis://cache", "--state")).toMatchObject({ host: "cache", port: 6379, db: 0 });
    expect(parseRedisUrl("rediss://cache:7000", "--state")).toMatchObject({ tls: true, port: 7000 });
  });

  test("a password is kept for the client and hidden in the display form", () => {
    const parsed = parseRedisUrl("redis://user:secret@cache:6379/1", "--state");
    expect(parsed.url).toContain("secret");
    expect(parsed.display).not.toContain("secret");
  });

  test("mistakes name the flag and the problem", () => {
    expect(() => parseRedisUrl("cache:6379", "--state")).toThrow(/--state: .*scheme cache/);
    expect(() => parseRedisUrl("not a url", "--kv-remote")).toThrow(/--kv-remote: "not a url" is not a URL/);
    expect(() => parseRedisUrl("http://cache:6379", "--state")).toThrow(/scheme http/);
    expect(() => parseRedisUrl("redis://cache:6379/zero", "--state")).toThrow(/database "zero"/);
    expect(() => parseRedisUrl("redis://cache:6379/1?x=1", "--state")).toThrow(/query or fragment/);
  });
});
