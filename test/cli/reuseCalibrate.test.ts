/**
 * `ctxr reuse calibrate` as a user runs it, on models/quality and the real CPU runner: the
 * report names a ratio per policy with its bound (text and --json), and the request file's and
 * flags' errors name what is wrong.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

const MODEL = join(import.meta.dir, "../../models/quality");
const EXAMPLES = join(import.meta.dir, "../../samples/reuse-calibrate/quality-dependence.jsonl");
let folder: { path: string; cleanup(): void };
let env: Record<string, string> = {};

function requestsFile(name: string, lines: readonly string[]): string {
  const path = join(folder.path, name);
  writeFileSync(path, lines.join("\n") + "\n");
  return path;
}

const calibrate = (args: string[]) => runCli(["reuse", "calibrate", "--model", MODEL, "--threads", "1", ...args], { env });

beforeAll(() => {
  env = { CTXR_RUNNER: buildRunner() };
  folder = tempFolder("ctxr-reuse-calibrate-");
}, 300_000);

afterAll(() => folder?.cleanup());

describe("ctxr reuse calibrate", () => {
  test("reports per policy the smallest ratio meeting the target with its one-sided 95% bound, in text and --json", () => {
    // Six dependence examples (the referrer cached after another record): at 0.05 prophet's single
    // recomputed token cannot repair the stale value, at 0.6 every policy but epic does.
    const requests = requestsFile("six.jsonl", readFileSync(EXAMPLES, "utf8").split("\n").slice(0, 6));
    const json = join(folder.path, "report.json");
    const run = calibrate(["--requests", requests, "--target", "0.9", "--tokens", "4", "--policies", "prophet,cachecraft", "--ratios", "0.6,0.05", "--json", json]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("ctxr: 6 requests, 4 greedy tokens each, target agreement 0.9");
    expect(run.stdout).toContain("bound: one-sided 95%, bootstrap over requests");
    expect(run.stdout).toMatch(/prophet +ratio 0\.6 \(lower bound 100\.0%\); with its bound meeting 0\.9: 0\.6/);
    const report = JSON.parse(readFileSync(json, "utf8"));
    expect(report).toMatchObject({ requests: 6, target: 0.9, tokens: 4 });
    expect(report.bound).toContain("bootstrap over requests");
    expect(report.cells.map((c: any) => `${c.policy}@${c.ratio}`)).toEqual(["prophet@0.05", "prophet@0.6", "cachecraft@0.05", "cachecraft@0.6"]);
    const cell = (policy: string, ratio: number) => report.cells.find((c: any) => c.policy === policy && c.ratio === ratio);
    expect(cell("prophet", 0.05).agreement).toBeLessThan(0.9);
    expect(cell("prophet", 0.6)).toMatchObject({ agreement: 1, lower_bound: 1, top1_agreement: 1 });
    for (const c of report.cells) {
      expect(c.lower_bound).toBeLessThanOrEqual(c.agreement);
      // The ratio as applied: the share of the reused chunks' tokens recomputed is about the ratio.
      expect(Math.abs(c.recomputed_share - c.ratio)).toBeLessThan(0.05);
    }
    const prophet = report.policies.find((p: any) => p.policy === "prophet");
    expect(prophet).toEqual({ policy: "prophet", ratio: 0.6, lower_bound: 1, confident_ratio: 0.6 });
    expect(report.policies.map((p: any) => p.policy)).toEqual(["prophet", "cachecraft"]);
  });

  test("every cell meets the cache as the warm-up left it: a policy's figures do not depend on the cells before it", () => {
    const requests = requestsFile("four.jsonl", readFileSync(EXAMPLES, "utf8").split("\n").slice(0, 4));
    const report = (policies: string) => {
      const json = join(folder.path, `${policies}.json`);
      const run = calibrate(["--requests", requests, "--target", "0.9", "--tokens", "4", "--policies", policies, "--ratios", "0.05,0.15", "--json", json]);
      expect(run.code).toBe(0);
      return JSON.parse(readFileSync(json, "utf8")).cells as { policy: string; ratio: number }[];
    };
    const alone = report("cachecraft");
    const after = report("prophet,cachecraft").filter((c) => c.policy === "cachecraft");
    expect(after).toEqual(alone);
  });

  test("a malformed line is an error naming the file and line, exit 2", () => {
    const cases: [string[], string][] = [
      [['{"documents": ["A1\\n"], "question": "?A"}', "{not json"], "line 2: not valid JSON"],
      [['{"documents": [], "question": "?A"}'], 'line 1: "documents" must be a non-empty array of strings'],
      [["", '{"documents": ["A1\\n", 3], "question": "?A"}'], 'line 2: "documents"[1] must be a non-empty string'],
      [['{"documents": ["A1\\n"]}'], 'line 1: "question" must be a non-empty string'],
      [['{"documents": ["A1\\n", "B2\\n"], "question": "?A", "warmup_order": [0, 0]}'], 'line 1: "warmup_order" must list each document index 0..1 once'],
      [['{"documents": ["A1\\n"], "question": "?A", "prompt": "x"}'], 'line 1: unknown field "prompt"'],
      [[""], "has no requests"],
    ];
    for (const [lines, message] of cases) {
      const path = requestsFile("bad.jsonl", lines);
      const run = calibrate(["--requests", path, "--target", "0.9"]);
      expect({ lines, code: run.code }).toEqual({ lines, code: 2 });
      expect(run.stderr).toContain(`${path} ${message}`);
    }
  });

  test("bad flags are usage errors; ctxr reuse --help and ctxr reuse calibrate --help exist", () => {
    const requests = requestsFile("one.jsonl", ['{"documents": ["A123\\n", "B456\\n"], "question": "?A"}']);
    const cases: [string[], string][] = [
      [["--requests", requests], "missing --target"],
      [["--requests", requests, "--target", "0"], "--target must be above 0 and at most 1, got '0'"],
      [["--requests", requests, "--target", "1.5"], "--target must be a number from 0 to 1, got '1.5'"],
      [["--requests", requests, "--target", "0.9", "--policies", "prophet,full"], "--policies takes prophet, cachecraft, epic (the policies a ratio sizes), got 'full'"],
      [["--requests", requests, "--target", "0.9", "--ratios", "0.1,,0.2"], "--ratios must be a comma-separated list, got '0.1,,0.2'"],
      [["--requests", requests, "--target", "0.9", "--ratios", "0.1,2"], "--ratios must be numbers from 0 to 1, got '2'"],
      [["--requests", requests, "--target", "0.9", "--tokens", "0"], "--tokens"],
      [["--requests", join(folder.path, "none.jsonl"), "--target", "0.9"], "does not exist"],
      [["--target", "0.9"], "missing --requests"],
    ];
    for (const [args, message] of cases) {
      const run = calibrate(args);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(message);
    }
    const group = runCli(["reuse", "--help"]);
    expect(group.code).toBe(0);
    expect(group.stdout).toContain("calibrate");
    const help = runCli(["reuse", "calibrate", "--help"]);
    expect(help.code).toBe(0);
    for (const flag of ["--model M", "--requests FILE", "--target A", "--policies P", "--ratios R", "--tokens N", "--json FILE", '"warmup_order"']) expect(help.stdout).toContain(flag);
    expect(runCli(["--help"]).stdout).toContain("reuse calibrate");
  });
});
