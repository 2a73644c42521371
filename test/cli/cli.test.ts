import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT, lastJsonLine, runCli, tempFolder } from "../helpers/cli.ts";

// These tests spawn processes; give them room on a busy machine.
setDefaultTimeout(120_000);

const packageVersion = (JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { version: string }).version;

let folder: { path: string; cleanup(): void };
beforeAll(() => {
  folder = tempFolder("ctxr-cli-");
});
afterAll(() => folder.cleanup());

/** A fresh sub-folder with contexts.jsonl holding `text`. */
let caseNumber = 0;
function caseFolder(text: string): { dir: string; input: string; output: string } {
  const dir = join(folder.path, `case${caseNumber++}`);
  mkdirSync(dir);
  writeFileSync(join(dir, "contexts.jsonl"), text);
  return { dir, input: "contexts.jsonl", output: "schedule.jsonl" };
}

describe("ctxr help and version", () => {
  test("--version prints package.json's version", () => {
    for (const flag of ["--version", "-V"]) {
      const run = runCli([flag]);
      expect(run.code).toBe(0);
      expect(run.stdout.trim()).toBe(packageVersion);
    }
  });

  test("--help lists the commands", () => {
    const run = runCli(["--help"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("index build");
    expect(run.stdout).toContain("simulate");
  });

  test("each command has --help", () => {
    for (const args of [["index", "build", "--help"], ["simulate", "--help"], ["index", "--help"], ["help", "simulate"]]) {
      const run = runCli(args);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain("Usage: ctxr");
    }
    expect(runCli(["index", "build", "-h"]).stdout).toContain("--capacity-tokens");
  });

  test("no command, an unknown command, or a bare group is a usage error", () => {
    for (const args of [[], ["frobnicate"], ["index"], ["index", "rebuild"]]) {
      const run = runCli(args);
      expect(run.code).toBe(2);
      expect(run.stdout).toBe("");
      expect(run.stderr.length).toBeGreaterThan(0);
    }
  });
});

describe("ctxr index build: bad input", () => {
  const cases: [string, string, string][] = [
    ["malformed JSON", "[1, 2]\n[3, 4\n", "contexts.jsonl:2: malformed JSON"],
    ["not an array or object", "[1, 2]\n\ntrue\n", "contexts.jsonl:3: expected a JSON array"],
    ["object without blocks", '{"id": "x", "docs": [1]}\n', 'contexts.jsonl:1: object has no "blocks" array'],
    ["float block id", "[1]\n[2, 3.25]\n", "contexts.jsonl:2: position 2: 3.25 is not a block id"],
    ["null block id", "[null]\n", "contexts.jsonl:1: position 1: null is not a block id"],
    ["nested block id", '[1, ["a"]]\n', "contexts.jsonl:1: position 2: an array is not a block id"],
    ["boolean block id", "[false]\n", "contexts.jsonl:1: position 1: false is not a block id"],
    ["empty context", "[1]\n[]\n", "contexts.jsonl:2: empty context"],
    ["repeated block", "[1, 2]\n\n\n[7, 42, 8, 42]\n", "contexts.jsonl:4: block 42 appears twice in one context"],
    ["no contexts", "\n\n", "contexts.jsonl: no contexts"],
  ];
  for (const [name, text, message] of cases) {
    test(`${name}: names the line, exits 2, writes nothing`, () => {
      const c = caseFolder(text);
      const run = runCli(["index", "build", "--input", c.input, "--output", c.output], { cwd: c.dir });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(message);
      expect(run.stdout).toBe("");
      expect(existsSync(join(c.dir, c.output))).toBe(false);
      expect(readdirSync(c.dir)).toEqual(["contexts.jsonl"]);
    });
  }

  test("an existing output file is left untouched on failure", () => {
    const c = caseFolder("[1, 2]\n[1, 1]\n");
    writeFileSync(join(c.dir, c.output), "KEEP ME\n");
    const run = runCli(["index", "build", "--input", c.input, "--output", c.output], { cwd: c.dir });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("contexts.jsonl:2: block 1 appears twice in one context");
    expect(readFileSync(join(c.dir, c.output), "utf8")).toBe("KEEP ME\n");
    expect(readdirSync(c.dir).sort()).toEqual(["contexts.jsonl", "schedule.jsonl"]);
  });

  test("an unreadable input (missing file, a folder) is an input error", () => {
    const c = caseFolder("[1]\n");
    mkdirSync(join(c.dir, "folder"));
    for (const input of ["missing.jsonl", "folder"]) {
      const run = runCli(["index", "build", "--input", input, "--output", c.output], { cwd: c.dir });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`cannot read ${input}`);
      expect(existsSync(join(c.dir, c.output))).toBe(false);
    }
  });

  test("an output in a missing folder fails before building", () => {
    const c = caseFolder("[1]\n");
    const run = runCli(["index", "build", "--input", c.input, "--output", "no/such/folder/out.jsonl"], { cwd: c.dir });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("cannot write no/such/folder/out.jsonl");
  });
});

describe("ctxr index build: bad flags", () => {
  const cases: [string, string[], string][] = [
    ["unknown flag", ["--frobnicate"], "unknown option --frobnicate"],
    ["missing value", ["--alpha"], "option --alpha needs a value"],
    ["value that looks like a flag", ["--capacity-tokens", "-5"], "option --capacity-tokens needs a value"],
    ["non-numeric alpha", ["--alpha", "abc"], "--alpha must be a non-negative number, got 'abc'"],
    ["negative alpha", ["--alpha=-1"], "--alpha must be a non-negative number"],
    ["negative capacity", ["--capacity-tokens=-5"], "--capacity-tokens must be a non-negative integer, got '-5'"],
    ["fractional capacity", ["--capacity-tokens", "1.5"], "--capacity-tokens must be a non-negative integer"],
    ["zero block tokens", ["--block-tokens", "0"], "--block-tokens must be a positive integer"],
    ["bad linkage", ["--linkage", "ward"], "--linkage must be one of average, single, complete, got 'ward'"],
    ["bad method", ["--method", "magic"], "--method must be one of auto, cluster, trie"],
    ["both capacities", ["--capacity-tokens", "5", "--capacity-frac", "0.2"], "not both"],
    ["capacity fraction above 1", ["--capacity-frac", "2"], "--capacity-frac must be a number from 0 to 1"],
    ["stray argument", ["extra"], "unexpected argument 'extra'"],
  ];
  for (const [name, flags, message] of cases) {
    test(name, () => {
      const c = caseFolder("[1, 2]\n");
      const run = runCli(["index", "build", "--input", c.input, "--output", c.output, ...flags], { cwd: c.dir });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(message);
      expect(run.stderr).toContain("ctxr index build --help");
      expect(existsSync(join(c.dir, c.output))).toBe(false);
    });
  }

  test("missing --input or --output", () => {
    expect(runCli(["index", "build", "--output", "x.jsonl"]).stderr).toContain("missing --input");
    const run = runCli(["index", "build", "--input", "x.jsonl"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("missing --output");
  });
});

interface OutputLine {
  id: string | number;
  blocks: (string | number)[];
  path: number[];
}

describe("ctxr index build: a good build", () => {
  const inputs: { id: string | number; blocks: (string | number)[] }[] = [];
  const lines: string[] = [];
  // Groups of contexts sharing blocks, in mixed forms: plain arrays (id = 0-based
  // line number, blank lines counted), objects with string ids and with numeric ids; string and integer blocks.
  for (let i = 0; i < 60; i++) {
    const group = i % 4;
    // Each context starts with its own block, so the input order shares no prefix.
    const blocks: (string | number)[] = [1000 + i, group * 100, group * 100 + 1, `doc-${group}`, (i * 7) % 13 === 0 ? "x" : 2000 + i];
    if (i % 3 === 0) {
      inputs.push({ id: lines.length, blocks });
      lines.push(JSON.stringify(blocks));
    } else if (i % 3 === 1) {
      lines.push(JSON.stringify({ id: `q${i}`, blocks, meta: { turn: 1 } }));
      inputs.push({ id: `q${i}`, blocks });
    } else {
      lines.push(JSON.stringify({ id: 10_000 + i, blocks }));
      inputs.push({ id: 10_000 + i, blocks });
    }
    if (i % 10 === 5) lines.push(""); // blank lines are skipped
  }
  const text = lines.join("\n") + "\n";

  let c: { dir: string; input: string; output: string };
  let run: ReturnType<typeof runCli>;
  beforeAll(() => {
    c = caseFolder(text);
    writeFileSync(join(c.dir, c.output), "old output, to be replaced\n");
    run = runCli(["index", "build", "--input", c.input, "--output", c.output], { cwd: c.dir });
  });

  test("exits 0, stderr quiet (not a terminal: no progress bar), no temporary files left", () => {
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(readdirSync(c.dir).sort()).toEqual(["contexts.jsonl", "schedule.jsonl"]);
  });

  test("output lines are the inputs, each once, blocks permuted, ids preserved", () => {
    const output = readFileSync(join(c.dir, c.output), "utf8")
      .trimEnd()
      .split("\n")
      .map((line) => JSON.parse(line) as OutputLine);
    expect(output.length).toBe(inputs.length);
    const byId = new Map(inputs.map((input) => [JSON.stringify(input.id), input]));
    const seen = new Set<string>();
    for (const line of output) {
      expect(Object.keys(line).sort()).toEqual(["blocks", "id", "path"]);
      const key = JSON.stringify(line.id);
      expect(byId.has(key)).toBe(true);
      expect(seen.has(key)).toBe(false);
      seen.add(key);
      const input = byId.get(key)!;
      // Same multiset of block ids with their types (1 and "1" differ).
      const sortKey = (b: string | number) => JSON.stringify(b);
      expect(line.blocks.map(sortKey).sort()).toEqual(input.blocks.map(sortKey).sort());
      expect(Array.isArray(line.path)).toBe(true);
      for (const step of line.path) expect(Number.isInteger(step)).toBe(true);
    }
  });

  test("the last stdout line is a JSON summary", () => {
    const summary = lastJsonLine(run.stdout);
    for (const key of ["contexts", "build_ms", "hit_ratio", "baseline_hit_ratio", "method", "blocks", "distinct_blocks"]) {
      expect(summary).toHaveProperty(key);
    }
    expect(summary.contexts).toBe(60);
    expect(summary.blocks).toBe(300);
    const distinct = new Set(inputs.flatMap((input) => input.blocks.map((b) => JSON.stringify(b)))).size;
    expect(summary.distinct_blocks).toBe(distinct);
    expect(["cluster", "trie"]).toContain(summary.method as string);
    expect(typeof summary.build_ms).toBe("number");
    expect(summary.capacity_tokens).toBeNull();
    // Every stdout line but the last is human text, not JSON.
    const stdoutLines = run.stdout.trimEnd().split("\n");
    expect(stdoutLines.length).toBeGreaterThan(1);
    for (const line of stdoutLines.slice(0, -1)) expect(line.startsWith("ctxr:")).toBe(true);
  });

  test("hit ratios agree with `ctxr simulate` on the output and on the input", () => {
    const summary = lastJsonLine(run.stdout);
    const onOutput = runCli(["simulate", "--input", c.output], { cwd: c.dir });
    expect(onOutput.code).toBe(0);
    expect(lastJsonLine(onOutput.stdout).hit_ratio).toBe(summary.hit_ratio as number);
    const onInput = runCli(["simulate", "--input", c.input], { cwd: c.dir });
    expect(lastJsonLine(onInput.stdout).hit_ratio).toBe(summary.baseline_hit_ratio as number);
    // Grouped contexts share prefixes once reordered; the input order shares none.
    expect(summary.baseline_hit_ratio).toBe(0);
    expect(summary.hit_ratio as number).toBeGreaterThan(0);
  });

  test("options: capacity, method, linkage, alpha", () => {
    const out = "schedule-limited.jsonl";
    const limited = runCli(
      ["index", "build", "--input", c.input, "--output", out, "--capacity-tokens", "2560", "--block-tokens", "128",
        "--method", "trie", "--linkage", "complete", "--alpha", "0.01"],
      { cwd: c.dir },
    );
    expect(limited.code).toBe(0);
    const summary = lastJsonLine(limited.stdout);
    expect(summary.capacity_tokens).toBe(2560);
    expect(summary.block_tokens).toBe(128);
    const check = runCli(["simulate", "--input", out, "--capacity-tokens", "2560", "--block-tokens", "128"], { cwd: c.dir });
    expect(lastJsonLine(check.stdout).hit_ratio).toBe(summary.hit_ratio as number);
    for (const method of ["cluster", "auto"]) {
      const other = runCli(["index", "build", "--input", c.input, "--output", `s-${method}.jsonl`, "--method", method, "--linkage", "single"], {
        cwd: c.dir,
      });
      expect(other.code).toBe(0);
      expect(lastJsonLine(other.stdout).contexts).toBe(60);
    }
  });
});

describe("ctxr index build: text blocks, as the online API takes them", () => {
  test("text blocks without ids share by their text, objects come out as written, numeric and string ids still work", () => {
    const shared = ["The Eiffel Tower is in Paris.", "Paris is the capital of France."];
    const lines = [
      JSON.stringify({ id: "a", blocks: [{ text: "own a" }, { text: shared[0] }, { text: shared[1] }] }),
      JSON.stringify({ id: "b", blocks: [{ text: "own b" }, { text: `  ${shared[1]}\n` }, { id: 7, text: "seven" }] }),
      JSON.stringify({ id: "c", blocks: [{ text: "own c" }, { text: shared[0] }, { text: shared[1] }, 7] }),
      JSON.stringify([5, "x", 6]),
      JSON.stringify({ id: 9, blocks: [{ id: "x" }, 5] }),
    ];
    const c = caseFolder(lines.join("\n") + "\n");
    const run = runCli(["index", "build", "--input", c.input, "--output", c.output], { cwd: c.dir });
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const summary = lastJsonLine(run.stdout);
    // own a/b/c, the two shared texts, 7, 5, "x", 6.
    expect(summary.distinct_blocks).toBe(9);
    expect(summary.hit_ratio as number).toBeGreaterThan(summary.baseline_hit_ratio as number);
    const output = readFileSync(join(c.dir, c.output), "utf8").trimEnd().split("\n").map((line) => JSON.parse(line) as { id: unknown; blocks: unknown[] });
    const byId = new Map(output.map((line) => [JSON.stringify(line.id), line.blocks]));
    // Text blocks come out as first written (whitespace and all), so the schedule carries the text.
    expect(byId.get('"a"')!.map((block) => JSON.stringify(block)).sort()).toEqual([{ text: "own a" }, { text: shared[0] }, { text: shared[1] }].map((block) => JSON.stringify(block)).sort());
    // Block 7 was first written as an object (in b), "x" as a plain id (before {"id": "x"}).
    expect(byId.get('"c"')).toContainEqual({ id: 7, text: "seven" });
    // a and c share both texts: the schedule puts them first, in the same order.
    expect(byId.get('"a"')!.slice(0, 2)).toEqual(byId.get('"c"')!.slice(0, 2));
    expect(byId.get("9")!.sort()).toEqual([5, "x"].sort());
  });

  test("a bad block object names the line and position, exits 2", () => {
    const c = caseFolder('[1]\n[{"text": "x", "title": "t"}]\n');
    const run = runCli(["index", "build", "--input", c.input, "--output", c.output], { cwd: c.dir });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('contexts.jsonl:2: position 1: unknown block field "title"');
    expect(existsSync(join(c.dir, c.output))).toBe(false);
  });
});

describe("ctxr index build --method cluster: sizes it cannot hold", () => {
  test("200k contexts are refused before the build, naming the trie; the trie builds them", () => {
    const lines: string[] = [];
    for (let i = 0; i < 200_000; i++) lines.push(`[${i % 1000},${1000 + i}]`);
    const c = caseFolder(lines.join("\n") + "\n");
    const started = performance.now();
    const refused = runCli(["index", "build", "--input", c.input, "--output", c.output, "--method", "cluster"], { cwd: c.dir });
    expect(refused.stderr).toMatch(/^ctxr index build: the cluster method cannot hold 200000 contexts: its pairwise distance matrix needs about 149\.\d GiB, more than the 4 GiB of WebAssembly memory its kernels have \(about 3\d{4} contexts like these fit\); /);
    expect(refused.stderr).toContain("use the trie method (--method trie");
    expect(refused.stderr).not.toContain("out of WASM memory");
    expect(refused.code).toBe(2);
    expect(performance.now() - started).toBeLessThan(30_000);
    expect(existsSync(join(c.dir, c.output))).toBe(false);
    const trie = runCli(["index", "build", "--input", c.input, "--output", c.output, "--method", "trie"], { cwd: c.dir });
    expect(trie.code).toBe(0);
    expect(lastJsonLine(trie.stdout).contexts).toBe(200_000);
  });
});

describe("ctxr index build on the bundled sample", () => {
  test("samples/zipf_N128_k15.jsonl", () => {
    const out = join(folder.path, "sample-schedule.jsonl");
    const run = runCli(["index", "build", "--input", "samples/zipf_N128_k15.jsonl", "--output", out]);
    expect(run.code).toBe(0);
    const summary = lastJsonLine(run.stdout);
    expect(summary.contexts).toBe(128);
    expect(summary.blocks).toBe(128 * 15);
    // The input order's figure is sim.py's (test/fixtures/sim/expected.json).
    expect(summary.baseline_hit_ratio).toBe(0.030208333333333334);
    expect(readFileSync(out, "utf8").trimEnd().split("\n").length).toBe(128);
  });
});

describe("ctxr simulate", () => {
  test("agrees with sim.py's figures on a sample (unlimited, --capacity-frac, --capacity-tokens)", () => {
    const unlimited = runCli(["simulate", "--input", "samples/zipf_N2000_k15.jsonl"]);
    expect(unlimited.code).toBe(0);
    expect(unlimited.stdout.split("\n")[0]).toContain("hit ratio");
    expect(lastJsonLine(unlimited.stdout)).toMatchObject({
      requests: 2000,
      total_tokens: 7680000,
      hit_tokens: 421120,
      hit_ratio: 0.05483333333333333,
      capacity_tokens: null,
      evicted_blocks: 0,
    });
    const expected = { requests: 2000, total_tokens: 7680000, hit_tokens: 347904, hit_ratio: 0.0453, capacity_tokens: 1536000, evicted_blocks: 22641 };
    expect(lastJsonLine(runCli(["simulate", "--input", "samples/zipf_N2000_k15.jsonl", "--capacity-frac", "0.2"]).stdout)).toMatchObject(expected);
    expect(lastJsonLine(runCli(["simulate", "--input", "samples/zipf_N2000_k15.jsonl", "--capacity-tokens", "1536000"]).stdout)).toMatchObject(expected);
  });

  test("accepts what sim.py accepts: empty requests, repeated blocks, object lines", () => {
    const c = caseFolder('[1, 2]\n\n[]\n{"blocks": [1, 2, 2]}\n');
    const run = runCli(["simulate", "--input", c.input, "--block-tokens", "1"], { cwd: c.dir });
    expect(run.code).toBe(0);
    expect(lastJsonLine(run.stdout)).toMatchObject({ requests: 3, total_tokens: 5, hit_tokens: 2 });
  });

  test("bad input and bad flags", () => {
    const c = caseFolder("[1]\n[1, 0.5]\n");
    const bad = runCli(["simulate", "--input", c.input], { cwd: c.dir });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("contexts.jsonl:2: position 2: 0.5 is not a block id");
    expect(runCli(["simulate", "--input", "missing.jsonl"], { cwd: c.dir }).code).toBe(2);
    const flag = runCli(["simulate", "--input", c.input, "--capacity-tokens", "lots"], { cwd: c.dir });
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain("--capacity-tokens must be a non-negative integer, got 'lots'");
    expect(runCli(["simulate"]).stderr).toContain("missing --input");
  });
});
