/**
 * The KV cache groups' C++ unit tests (cuda/test/kv_groups_test.cpp, in build/runner-tests): the
 * layout of global and sliding-window layers, and FORWARD's check of a sliding table.
 */
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { type CliRun, REPO_ROOT, runProgram } from "../helpers/cli.ts";

setDefaultTimeout(600_000);

const CUDA_DIR = join(REPO_ROOT, "cuda");
const TESTS_BINARY = join(CUDA_DIR, "build", "runner-tests");

describe("KV cache group unit tests", () => {
  let build: CliRun;
  let run: CliRun | null = null;

  beforeAll(() => {
    build = runProgram(["make", "-C", CUDA_DIR, "-j2", "tests"]);
    if (build.code === 0 && existsSync(TESTS_BINARY)) run = runProgram([TESTS_BINARY, "kv_groups."]);
  }, 900_000);

  test("every kv_groups test ran and passed", () => {
    if (build.code !== 0) console.error(`make -C cuda tests: exit ${build.code}\n${build.stderr}`);
    expect(build.code).toBe(0);
    expect(run).not.toBeNull();
    if (run!.code !== 0) console.error(`runner-tests kv_groups.: exit ${run!.code}\n${run!.stdout}\n${run!.stderr}`);
    const passed = run!.stdout.split("\n").flatMap((line) => /^ok (\S+)/.exec(line)?.[1] ?? []);
    expect(passed).toEqual(["kv_groups.layout_splits_global_and_sliding_layers", "kv_groups.sliding_table_needs_the_window_of_every_new_token"]);
    expect(run!.code).toBe(0);
  });
});
