/**
 * `serve --status-sample-interval S`: the status page's sampling interval, from the command line,
 * CTXR_STATUS_SAMPLE_INTERVAL or --config, reported by GET /v1/stats/history and kept by the
 * sampler; bad values are refused with a message naming the flag and where the value came from.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCli } from "../../helpers/cli.ts";
import { spawnServer, type SpawnedServer } from "../serverKit.ts";

const dir = mkdtempSync(join(tmpdir(), "ctxr-status-sample-"));
const servers: SpawnedServer[] = [];
afterAll(async () => {
  for (const server of servers) {
    server.kill("SIGTERM");
    await server.exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

async function history(args: string[], env: Record<string, string> = {}) {
  const server = await spawnServer(["--in-memory", ...args], env);
  servers.push(server);
  const answer = await server.get("/v1/stats/history");
  expect(answer.status).toBe(200);
  return { server, body: answer.body };
}

describe("--status-sample-interval", () => {
  test("default 2 s", async () => {
    const { body } = await history([]);
    expect(body.every_ms).toBe(2000);
  });

  test("from the command line: the sampler takes a sample every S seconds", async () => {
    const { server, body } = await history(["--status-sample-interval", "0.2"]);
    expect(body.every_ms).toBe(200);
    await Bun.sleep(1100);
    const later = (await server.get("/v1/stats/history")).body;
    // One at start, then one every 200 ms: at least 4 more in 1.1 s, and not 2 s apart.
    expect(later.samples.length).toBeGreaterThanOrEqual(4);
    const gaps = later.samples.slice(1).map((sample: any, i: number) => sample.time_ms - later.samples[i].time_ms);
    expect(Math.max(...gaps)).toBeLessThan(1000);
  });

  test("from CTXR_STATUS_SAMPLE_INTERVAL and from --config; the command line wins", async () => {
    expect((await history([], { CTXR_STATUS_SAMPLE_INTERVAL: "0.5" })).body.every_ms).toBe(500);
    const config = join(dir, "ctxr.json");
    writeFileSync(config, JSON.stringify({ status_sample_interval: 7.5 }));
    expect((await history(["--config", config])).body.every_ms).toBe(7500);
    expect((await history(["--config", config, "--status-sample-interval", "3"], { CTXR_STATUS_SAMPLE_INTERVAL: "0.5" })).body.every_ms).toBe(3000);
  });

  test("bad values: a clear error naming the flag (and the source), exit non-zero", () => {
    for (const [args, env, message] of [
      [["--status-sample-interval", "0"], {}, "--status-sample-interval must be a number from 0.1 to 3600, got '0'"],
      [["--status-sample-interval", "2s"], {}, "--status-sample-interval"],
      [["--status-sample-interval", "100000"], {}, "got '100000'"],
      [[], { CTXR_STATUS_SAMPLE_INTERVAL: "-1" }, "CTXR_STATUS_SAMPLE_INTERVAL"],
    ] as const) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...args], { env: { ...env } });
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain(message);
      expect(run.stderr).not.toContain("    at "); // a message, not a stack trace
    }
  });
});
