/**
 * The CPU paged-attention unit tests (cuda/test/attention_test.cpp, in build/runner-tests):
 * the AVX2 prefill-tile, per-token and statistics paths against a double-precision reference on
 * random paged layouts, and over an f16 cache against the f32 one; gpt-oss's attention sinks on
 * every path. They must all run and pass.
 */
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { type CliRun, REPO_ROOT, runProgram } from "../helpers/cli.ts";

setDefaultTimeout(600_000);

const CUDA_DIR = join(REPO_ROOT, "cuda");
const TESTS_BINARY = join(CUDA_DIR, "build", "runner-tests");
const ATTENTION_TESTS = [
  "attention.backend_wiring",
  "attention.block_sizes_and_odd_head_dims",
  "attention.gqa_and_head_dims",
  "attention.long_prefill_peaky",
  "attention.many_decodes",
  "attention.statistics",
  "attention.unordered_runs",
  "attention.f16_rounding_matches_f16c",
  "attention.f16_cache_decode_and_prefill",
  "attention.f16_cache_chunk_statistics",
  "attention.f16_backend_cache",
  "attention.sliding_window",
  "attention.sliding_window_freed_blocks",
  "attention.sinks",
  "attention.sinks_change_the_softmax_as_an_extra_entry",
];

describe("CPU attention unit tests", () => {
  let build: CliRun;
  let run: CliRun | null = null;

  beforeAll(() => {
    build = runProgram(["make", "-C", CUDA_DIR, `-j${availableParallelism()}`, "tests"]);
    if (build.code === 0 && existsSync(TESTS_BINARY)) run = runProgram([TESTS_BINARY, "attention."]);
  }, 900_000);

  test("make -C cuda tests builds", () => {
    if (build.code !== 0) console.error(`make -C cuda tests: exit ${build.code}\n${build.stderr}`);
    expect(build.code).toBe(0);
  });

  test("every attention test ran and passed", () => {
    expect(run).not.toBeNull();
    if (run!.code !== 0) console.error(`runner-tests attention.: exit ${run!.code}\n${run!.stdout}\n${run!.stderr}`);
    expect(run!.stdout).not.toMatch(/^FAIL /m);
    const passed = run!.stdout.split("\n").flatMap((line) => /^ok (\S+)/.exec(line)?.[1] ?? []);
    expect(passed).toEqual(expect.arrayContaining(ATTENTION_TESTS));
    expect(run!.code).toBe(0);
  });
});
