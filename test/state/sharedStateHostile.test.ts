/**
 * The shared state over a Redis someone else can write to, or that misbehaves: garbage and
 * type-confused log entries, deleted entries, a garbage snapshot, a long outage under a write
 * flood, and connections that fail for a wrong password, an untrusted certificate or nothing
 * listening. Several `ctxr serve --state` processes over real redis-servers; every replica must
 * keep converging, and each failure must be named.
 */
import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freeTcpPort } from "../helpers/freeTcpPort.ts";
import { redisServerPath, startRedisServer, type RedisServer } from "../helpers/redisServer.ts";
import { spawnServer, type SpawnedServer } from "../server/serverKit.ts";
import { stats, until } from "./sharedStateKit.ts";

setDefaultTimeout(90_000);

let redis: RedisServer;
const running: SpawnedServer[] = [];

beforeAll(async () => {
  // A 1 MB bulk limit (Redis's smallest) makes the entry cap 256 KB: splitting shows with a small queue.
  redis = await startRedisServer({ appendOnly: true, extraArgs: ["--proto-max-bulk-len", "1mb"] });
});
afterAll(async () => {
  await redis.stop();
});
afterEach(async () => {
  for (const server of running.splice(0)) {
    server.kill(9);
    await server.exited;
  }
  if (redis.pid === undefined) await redis.start();
  redis.cli("FLUSHALL");
});

async function instance(...extra: string[]): Promise<SpawnedServer> {
  const server = await spawnServer(["--state", redis.url, ...extra]);
  running.push(server);
  return server;
}

const block = (id: string, repeat = 20) => ({ id, text: `document ${id} `.repeat(repeat) });

async function reorder(server: SpawnedServer, id: string, repeat = 20) {
  const answer = await server.post("/v1/reorder", { contexts: [[block(id, repeat)]] });
  expect(answer.status).toBe(200);
}

/** Every server holds `contexts` contexts (converged). */
async function converged(servers: SpawnedServer[], contexts: number): Promise<void> {
  await until(`${servers.length} instances to hold ${contexts} contexts`, async () => (await Promise.all(servers.map(stats))).every((figures) => figures.contexts === contexts));
}

function peakRssBytes(pid: number): number {
  const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match![1]) * 1024;
}

describe("the shared log over a hostile Redis", () => {
  test("a garbage entry and a type-confused one are skipped whole by every instance: all converge, a new one loads", async () => {
    const [a, b] = await Promise.all([instance(), instance()]);
    await reorder(a, "x");
    await converged([a, b], 1);
    const garbage = redis.cli("XADD", "ctxr:state:log", "*", "foo", "bar").trim();
    // A valid insert followed by a type-confused one: nothing of the entry may be applied.
    const valid = { c: "service", r: { op: "insert", id: "evil-1", keys: ["evil"], tokens: [5], at: 1 } };
    const confused = { c: "service", r: { op: "insert", id: "evil-2", keys: "evil", tokens: [5], at: 1 } };
    const halfValid = redis.cli("XADD", "ctxr:state:log", "*", "o", "intruder", "f", "1", "n", "1", "d", JSON.stringify([valid, confused])).trim();
    await reorder(a, "y");
    await reorder(b, "z");
    await converged([a, b], 3);

    for (const server of [a, b]) {
      const shared = (await stats(server)).shared_state;
      expect(shared.skipped_entries).toBe(2);
      expect(shared.read_errors).toBe(0);
      expect(shared.healthy).toBe(true);
      expect(shared.recent_dead_letters.map((dead: { id: string }) => dead.id)).toEqual([garbage, halfValid]);
      expect((await server.get("/healthz")).body).toEqual({ status: "ok" });
    }
    expect(a.stderr()).toContain(`skipped log entry ${garbage} (dead letter)`);
    expect(a.stderr()).toContain(`skipped log entry ${halfValid} (dead letter)`);
    const c = await instance();
    expect((await stats(c)).contexts).toBe(3);
    expect((await stats(c)).shared_state.skipped_entries).toBe(2);
    // The half-valid entry's good insert was not applied anywhere.
    const evict = await c.post("/v1/evict", { request_ids: ["evil-1"] });
    expect(evict.body.evicted).toBe(0);
  });

  test("XDEL of entries (the garbage one, and the log's last): no endless reloads; a new instance loads; writes keep converging", async () => {
    const [a, b] = await Promise.all([instance(), instance()]);
    await reorder(a, "x");
    await reorder(b, "y");
    await converged([a, b], 2);
    const garbage = redis.cli("XADD", "ctxr:state:log", "*", "foo", "bar").trim();
    await reorder(a, "w");
    await converged([a, b], 3);
    redis.cli("XDEL", "ctxr:state:log", garbage);
    // The log's last entry deleted too: removals past every reader's position.
    const last = redis.cli("XADD", "ctxr:state:log", "*", "foo", "baz").trim();
    redis.cli("XDEL", "ctxr:state:log", last);

    const c = await instance();
    expect((await stats(c)).contexts).toBe(3);
    // Past a gap check (every 5 s): nobody reloads in a loop, nobody reports trimming.
    await Bun.sleep(6_000);
    await reorder(c, "v");
    await converged([a, b, c], 4);
    for (const server of [a, b, c]) {
      const shared = (await stats(server)).shared_state;
      expect(shared.healthy).toBe(true);
      expect(shared.read_errors).toBe(0);
      expect(shared.resyncs).toBe(0);
      expect(server.stderr()).not.toContain("trimmed");
    }
  });

  test("a garbage snapshot: a new instance loads from the log alone and says so; a healthy instance writes a new one and every replica converges", async () => {
    const a = await instance("--state-snapshot-every", "5");
    for (let i = 0; i < 12; i++) await reorder(a, `s${i}`);
    // Two snapshots: the log is trimmed behind the first, so the log alone no longer holds everything.
    await until("two snapshots", async () => (await stats(a)).shared_state.snapshots_written >= 2);
    redis.cli("SET", "ctxr:state:snapshot", "{garbage");

    const c = await instance("--state-snapshot-every", "5");
    const figures = await stats(c);
    expect(figures.contexts).toBeLessThan(12);
    expect(figures.shared_state.healthy).toBe(true);
    expect(figures.shared_state.garbage_snapshots).toBe(1);
    expect(figures.shared_state.snapshot_problem).toMatch(/not JSON/);
    expect(c.stderr()).toMatch(/snapshot in Redis \(ctxr:state:snapshot\) is unusable: it is not JSON/);

    // a notices at its next gap check (every 5 s) and writes a new snapshot; c reloads from it.
    await reorder(a, "s12");
    await converged([a, c], 13);
    expect(a.stderr()).toContain("writing a new one");
    expect((await stats(c)).shared_state.snapshot_problem).toBeNull();
    const d = await instance();
    expect((await stats(d)).contexts).toBe(13);
    expect((await stats(d)).shared_state.snapshot_problem).toBeNull();
  });

  test("a long outage under a flood: writes past --state-queue-bytes get 503 + Retry-After and change nothing; recovery sends entries under the bulk limit", async () => {
    const [a, b] = await Promise.all([instance("--state-queue-bytes", "1MiB"), instance()]);
    await reorder(a, "before");
    await converged([a, b], 1);
    await redis.kill();
    await until("a to notice", async () => (await a.get("/healthz")).body.status === "degraded");

    // Reorders whose changes are ~110 KB each (1,000 blocks with long ids), as in the reported probe.
    const flood = (i: number) => Array.from({ length: 1000 }, (_, j) => ({ id: `flood-${i}-${j}-${"x".repeat(90)}`, tokens: 1 }));
    let accepted = 0;
    let refused: Awaited<ReturnType<SpawnedServer["post"]>> | null = null;
    for (let i = 0; i < 40 && refused === null; i++) {
      const answer = await a.post("/v1/reorder", { contexts: [flood(i)] });
      if (answer.status === 503) refused = answer;
      else {
        expect(answer.status).toBe(200);
        accepted++;
      }
    }
    expect(refused).not.toBeNull();
    expect(accepted).toBeGreaterThanOrEqual(5);
    expect(refused!.headers.get("retry-after")).toBe("5");
    expect(refused!.body.error).toMatchObject({ type: "service_unavailable", code: "state_queue_full", param: null });
    expect(refused!.body.error.message).toContain("--state-queue-bytes");
    const held = (await stats(a)).contexts;
    expect(held).toBe(1 + accepted);
    // Refused requests change nothing; stateless ones are still served.
    expect((await a.post("/v1/dedup", { conversation_id: "q", blocks: [block("q")] })).status).toBe(503);
    expect((await a.post("/v1/schedule", { contexts: [[block("s")]] })).status).toBe(200);
    expect((await stats(a)).contexts).toBe(held);
    expect((await stats(a)).conversations).toBe(0);
    expect((await stats(a)).shared_state.unsent_bytes).toBeGreaterThanOrEqual(1024 * 1024);

    await redis.start();
    await until("a to send its queue", async () => (await stats(a)).shared_state.unsent_batches === 0);
    await converged([a, b], held);
    const shared = (await stats(a)).shared_state;
    // 1 MiB of queued changes under a 256 KB entry cap: several entries, none over it.
    expect(shared.appended_entries).toBeGreaterThanOrEqual(1 + 4);
    const lengths = redis
      .cli("--no-raw", "EVAL", "local out = {} for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do table.insert(out, string.len(e[2][8])) end return out", "1", "ctxr:state:log")
      .trim()
      .split("\n")
      .map((line) => Number(line.replace(/^\d+\)\s*\(integer\)\s*/, "")));
    expect(Math.max(...lengths)).toBeLessThanOrEqual(256 * 1024);
    expect((await a.post("/v1/dedup", { conversation_id: "q", blocks: [block("q")] })).status).toBe(200);
    const peak = peakRssBytes(a.process.pid);
    console.log(`outage flood: ${accepted} accepted, peak RSS (VmHWM) of the instance ${(peak / 2 ** 20).toFixed(0)} MiB, redis-server ${(peakRssBytes(redis.pid!) / 2 ** 20).toFixed(0)} MiB`);
    expect(peak).toBeLessThan(2 ** 30);
  });
});

describe("connection failures are named", () => {
  test("a wrong password, a missing one, and nothing listening", async () => {
    const guarded = await startRedisServer({ extraArgs: ["--requirepass", "the-right-password"], password: "the-right-password" });
    const closedPort = await freeTcpPort();
    try {
      const cases: [string, RegExp][] = [
        [`redis://:wrong-password@127.0.0.1:${guarded.port}`, /refused the password \(wrong password\)/],
        [`redis://127.0.0.1:${guarded.port}`, /needs a password/],
        [`redis://127.0.0.1:${closedPort}`, /nothing is listening at 127\.0\.0\.1:\d+ \(connection refused\)/],
      ];
      for (const [url, reason] of cases) {
        const server = await spawnServer(["--state", url]);
        running.push(server);
        const shared = (await stats(server)).shared_state;
        expect(shared.healthy).toBe(false);
        expect(shared.degraded_reason).toMatch(reason);
        expect(server.stderr()).toMatch(reason);
        expect(server.stderr()).not.toContain("wrong-password");
      }
      const right = await spawnServer(["--state", `redis://:the-right-password@127.0.0.1:${guarded.port}`]);
      running.push(right);
      expect((await stats(right)).shared_state.healthy).toBe(true);
    } finally {
      await guarded.stop();
    }
  });

  test("rediss://: an untrusted certificate is named; --redis-ca with the right CA connects", async () => {
    if (spawnSync("sh", ["-c", "command -v openssl"]).status !== 0) throw new Error("openssl is not installed: this test makes its own certificates");
    const dir = mkdtempSync(join(tmpdir(), "ctxr-redis-tls-"));
    const run = (...args: string[]) => {
      const result = spawnSync("openssl", args, { cwd: dir, encoding: "utf8" });
      if (result.status !== 0) throw new Error(`openssl ${args.join(" ")}: ${result.stderr}`);
    };
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ctxr test CA");
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other.key", "-out", "other.crt", "-days", "2", "-subj", "/CN=another CA");
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1");
    writeFileSync(join(dir, "ext"), "subjectAltName=IP:127.0.0.1\n");
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext");
    const port = await freeTcpPort();
    const tlsRedis = spawn(redisServerPath(), ["--port", "0", "--tls-port", String(port), "--bind", "127.0.0.1", "--tls-cert-file", "server.crt", "--tls-key-file", "server.key", "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no", "--save", "", "--dir", dir], { cwd: dir, stdio: "ignore" });
    try {
      await until("the TLS redis-server", async () => spawnSync("redis-cli", ["--tls", "--cacert", join(dir, "ca.crt"), "-p", String(port), "PING"], { encoding: "utf8" }).stdout.trim() === "PONG", 10_000);
      const url = `rediss://127.0.0.1:${port}`;
      const untrusted = await spawnServer(["--state", url]);
      running.push(untrusted);
      expect((await stats(untrusted)).shared_state.degraded_reason).toMatch(/TLS certificate of 127\.0\.0\.1:\d+ is not trusted by the system's CAs \(give the server's CA with --redis-ca FILE\)/);
      const wrongCa = await spawnServer(["--state", url, "--redis-ca", join(dir, "other.crt")]);
      running.push(wrongCa);
      expect((await stats(wrongCa)).shared_state.degraded_reason).toMatch(/not trusted by the CA in .*other\.crt/);

      const trusted = await spawnServer(["--state", url, "--redis-ca", join(dir, "ca.crt")]);
      running.push(trusted);
      expect((await stats(trusted)).shared_state.healthy).toBe(true);
      await reorder(trusted, "over-tls");
      const second = await spawnServer(["--state", url, "--redis-ca", join(dir, "ca.crt")]);
      running.push(second);
      expect((await stats(second)).contexts).toBe(1);
    } finally {
      tlsRedis.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("bad --redis-ca, --state-queue-bytes and --kv-remote-secret values are refused before anything starts", async () => {
    const { runCli } = await import("../helpers/cli.ts");
    const missing = runCli(["serve", "--state", redis.url, "--redis-ca", "/nonexistent/ca.pem"]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain("--redis-ca /nonexistent/ca.pem: cannot read it (ENOENT)");
    const queue = runCli(["serve", "--state-queue-bytes", "1MiB"]);
    expect(queue.stderr).toContain("--state-queue-bytes needs --state");
    const secret = runCli(["serve", "--kv-remote-secret", "0123456789abcdef0123"]);
    expect(secret.code).not.toBe(0);
    expect(secret.stderr).toContain("--kv-remote-secret");
  });
});
