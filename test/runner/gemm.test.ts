/**
 * The runner's C++ unit tests (cuda/test/*.cpp, built by `make -C cuda tests` into
 * cuda/build/runner-tests): every registered test must pass, and the CPU GEMM tests must be
 * among them. The first build compiles the whole CPU runner (tens of seconds to minutes).
 */
import { beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { type CliRun, REPO_ROOT, runProgram } from "../helpers/cli.ts";

setDefaultTimeout(600_000);

const CUDA_DIR = join(REPO_ROOT, "cuda");
const TESTS_BINARY = join(CUDA_DIR, "build", "runner-tests");
const GEMM_TESTS = [
  "gemm.packed_dims",
  "gemm.exact_integers",
  "gemm.edge_shapes",
  "gemm.random_shapes",
  "gemm.decode_rows",
  "gemm.tiny_model_prefill",
  "gemm.llama_prefill_shapes",
  "gemm.threads_bitwise_equal",
];

describe("runner C++ unit tests", () => {
  let build: CliRun;
  let run: CliRun | null = null;

  beforeAll(() => {
    build = runProgram(["make", "-C", CUDA_DIR, `-j${availableParallelism()}`, "tests"]);
    if (build.code === 0 && existsSync(TESTS_BINARY)) run = runProgram([TESTS_BINARY]);
  }, 900_000);

  test("make -C cuda tests builds", () => {
    if (build.code !== 0) console.error(`make -C cuda tests: exit ${build.code}\n${build.stderr}`);
    expect(build.code).toBe(0);
    expect(existsSync(TESTS_BINARY)).toBe(true);
  });

  test("runner-tests passes", () => {
    expect(run).not.toBeNull();
    if (run!.code !== 0) console.error(`runner-tests: exit ${run!.code}\n${run!.stdout}\n${run!.stderr}`);
    expect(run!.stdout).not.toMatch(/^FAIL /m);
    expect(run!.stdout).toMatch(/^\d+ passed, 0 failed$/m);
    expect(run!.code).toBe(0);
  });

  test("the CPU GEMM tests ran and passed", () => {
    expect(run).not.toBeNull();
    const passed = run!.stdout.split("\n").flatMap((line) => /^ok (\S+)/.exec(line)?.[1] ?? []);
    expect(passed).toEqual(expect.arrayContaining(GEMM_TESTS));
  });
});
