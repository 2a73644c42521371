/** `ctxr serve --reuse-target-agreement`, `--min-ratio`, `--max-ratio` through the real CLI. */
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { spawnServer } from "../server/serverKit.ts";
import { reuseTargetFromFlags } from "../../src/cli/commands/reuseTargetFlags.ts";
import { DEFAULT_TARGET_AUDIT_RATE } from "../../src/engine/reuseTarget.ts";

setDefaultTimeout(120_000);

const folder = tempFolder();
afterAll(() => folder.cleanup());

describe("ctxr serve --reuse-target-agreement", () => {
  test("listed in --help; bad values, min above max and ratio bounds without a target are usage errors; model-only", () => {
    const help = runCli(["serve", "--help"]).stdout;
    for (const flag of ["--reuse-target-agreement A", "--min-ratio R", "--max-ratio R"]) expect(help).toContain(flag);
    const missing = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--reuse-target-agreement", "0"], "--reuse-target-agreement must be above 0 and at most 1, got '0'"],
      [["--reuse-target-agreement", "1.2"], "--reuse-target-agreement must be a number from 0 to 1, got '1.2'"],
      [["--reuse-target-agreement", "high"], "--reuse-target-agreement must be a number from 0 to 1, got 'high'"],
      [["--reuse-target-agreement", "0.9", "--min-ratio=-0.1"], "--min-ratio must be a number from 0 to 1, got '-0.1'"],
      [["--reuse-target-agreement", "0.9", "--max-ratio", "2"], "--max-ratio must be a number from 0 to 1, got '2'"],
      [["--reuse-target-agreement", "0.9", "--min-ratio", "0.5", "--max-ratio", "0.4"], "--min-ratio (0.5) must not be above --max-ratio (0.4)"],
      [["--min-ratio", "0.1"], "--min-ratio needs --reuse-target-agreement"],
      [["--max-ratio", "0.5"], "--max-ratio needs --reuse-target-agreement"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...missing, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    const proxyOnly = runCli(["serve", "--in-memory", "--port", "0", "--reuse-target-agreement", "0.9"]);
    expect(proxyOnly.code).toBe(2);
    expect(proxyOnly.stderr).toContain("ctxr serve: --reuse-target-agreement needs --model");
  });

  test("a served model with a target shows its cells in /v1/stats and /metrics (CTXR_MAX_RATIO from the environment)", async () => {
    const model = tinyModelFolder({}, "tiny");
    const server = await spawnServer(["--in-memory", "--model", model.path, "--threads", "1", "--kv-blocks", "128", "--reuse-target-agreement", "0.95", "--recompute-ratio", "0.5"], {
      CTXR_RUNNER: buildRunner(),
      CTXR_MAX_RATIO: "0.4",
    });
    try {
      const target = (await server.get("/v1/stats")).body.engine.reuse_target;
      expect(target).toMatchObject({ target: 0.95, min_ratio: 0.05, max_ratio: 0.4, audit_rate: 0.05 });
      // --recompute-ratio 0.5 clamped to --max-ratio.
      for (const cell of target.cells) expect(cell.ratio).toBe(0.4);
      expect((await server.get("/metrics")).text).toContain('ctxr_reuse_target_ratio{model="tiny",policy="prophet"} 0.4\n');
    } finally {
      server.process.kill("SIGTERM");
      await server.exited;
      model.cleanup();
    }
  });

  // --reuse-audit-rate belongs to the live audit (issue 31, item 4); once it is registered with
  // serve's flags, these are what a target does with it.
  test("a target turns the audit on at its default rate, keeps a given rate, and refuses a rate of 0 naming both flags", () => {
    const flags = (values: Record<string, string>) => ({ values, positionals: [] });
    expect(reuseTargetFromFlags(flags({ "reuse-target-agreement": "0.99" }), "serve")).toEqual({ target: 0.99, minRatio: 0.05, maxRatio: 0.6, auditRate: DEFAULT_TARGET_AUDIT_RATE });
    expect(reuseTargetFromFlags(flags({ "reuse-target-agreement": "0.99", "reuse-audit-rate": "0.01" }), "serve")?.auditRate).toBe(0.01);
    expect(() => reuseTargetFromFlags(flags({ "reuse-target-agreement": "0.99", "reuse-audit-rate": "0" }), "serve")).toThrow(
      "--reuse-target-agreement needs audit samples: --reuse-audit-rate must be above 0",
    );
    expect(reuseTargetFromFlags(flags({}), "serve")).toBeNull();
  });
});
