/** `ctxr serve --reuse-audit-*` through the real CLI: listed in --help, validated (usage errors name the flag), model-only, and set on a spawned server (with CTXR_ env too). */
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { spawnServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

const folder = tempFolder("ctxr-reuse-audit-cli-");
afterAll(() => folder.cleanup());

describe("ctxr serve --reuse-audit-*", () => {
  test("listed in --help, in the engine's group", () => {
    const help = runCli(["serve", "--help"]).stdout;
    for (const flag of ["--reuse-audit-rate R", "--reuse-audit-tokens N", "--reuse-audit-warn-below"]) expect(help).toContain(flag);
    expect(help.indexOf("--reuse-audit-rate R")).toBeGreaterThan(help.indexOf("Engine: KV-cache managed generation"));
  });

  test("bad values are usage errors naming the flag; each needs --model", () => {
    const missing = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--reuse-audit-rate", "1.5"], "--reuse-audit-rate must be a number from 0 to 1, got '1.5'"],
      [["--reuse-audit-rate=-0.01"], "--reuse-audit-rate must be a number from 0 to 1, got '-0.01'"],
      [["--reuse-audit-rate", "often"], "--reuse-audit-rate must be a number from 0 to 1, got 'often'"],
      [["--reuse-audit-rate", "0.1", "--reuse-scoring-budget", "0"], "--reuse-audit-rate needs background work"],
      [["--reuse-audit-tokens", "0"], "--reuse-audit-tokens must be a positive integer, got '0'"],
      [["--reuse-audit-tokens", "2.5"], "--reuse-audit-tokens must be a positive integer, got '2.5'"],
      [["--reuse-audit-tokens", "100000"], "--reuse-audit-tokens must be a positive integer, at most 256, got '100000'"],
      [["--reuse-audit-warn-below", "2"], "--reuse-audit-warn-below must be a number from 0 to 1, got '2'"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...missing, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    for (const [flag, value] of [["--reuse-audit-rate", "0.1"], ["--reuse-audit-tokens", "4"], ["--reuse-audit-warn-below", "0.5"]]) {
      const run = runCli(["serve", "--in-memory", "--port", "0", flag!, value!]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`ctxr serve: ${flag} needs --model`);
    }
  });

  test("a server started with them reports them in /v1/stats and /metrics (CTXR_REUSE_AUDIT_RATE sets the rate)", async () => {
    const model = tinyModelFolder({}, "tiny");
    const server = await spawnServer(["--in-memory", "--model", model.path, "--threads", "1", "--kv-blocks", "128", "--reuse-audit-tokens", "5", "--reuse-audit-warn-below", "0.75"], {
      CTXR_RUNNER: buildRunner(),
      CTXR_REUSE_AUDIT_RATE: "0.01",
    });
    try {
      expect((await server.get("/v1/stats")).body.engine.reuse_audit).toMatchObject({ rate: 0.01, tokens: 5, warn_below: 0.75, audited: 0, cells: [] });
      expect((await server.get("/metrics")).text).toContain("ctxr_reuse_audit_rate 0.01\n");
    } finally {
      server.process.kill("SIGTERM");
      await server.exited;
      model.cleanup();
    }
  });
});
