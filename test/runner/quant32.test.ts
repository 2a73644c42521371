/**
 * The 32-element block formats' C++ unit tests (cuda/test/quant32_test.cpp: Q4_1, Q5_0, Q5_1,
 * IQ4_NL, MXFP4), on the best instruction set the CPU has and with CTXR_CPU_ISA=avx2.
 */
import { beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { REPO_ROOT, runProgram } from "../helpers/cli.ts";

setDefaultTimeout(600_000);

const CUDA_DIR = join(REPO_ROOT, "cuda");
const TESTS = [
  "quant32.dequantize_matches_gguf_py",
  "quant32.e8m0_half_scale",
  "quant32.reference_dot_is_the_dequantized_dot",
  "quant32.simd_dot_matches_reference",
  "quant32.linear_matches_f32_on_dequantized",
  "quant32.gemm_matches_row_dots",
  "quant32.activation_group_kernels_match_reference",
];

beforeAll(() => {
  const build = runProgram(["make", "-C", CUDA_DIR, `-j${availableParallelism()}`, "tests"]);
  if (build.code !== 0) throw new Error(`make -C cuda tests failed:\n${build.stderr}`);
}, 900_000);

for (const isa of [undefined, "avx2"]) {
  test(`Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 kernels pass${isa ? ` with CTXR_CPU_ISA=${isa}` : ""}`, () => {
    const result = Bun.spawnSync([join(CUDA_DIR, "build", "runner-tests"), "quant32."], { env: { ...process.env, ...(isa ? { CTXR_CPU_ISA: isa } : {}) }, stdout: "pipe" });
    const out = result.stdout.toString();
    if (result.exitCode !== 0) console.error(out);
    expect(result.exitCode).toBe(0);
    const passed = out.split("\n").flatMap((line) => /^ok (\S+)/.exec(line)?.[1] ?? []);
    expect(passed).toEqual(expect.arrayContaining(TESTS));
  });
}
