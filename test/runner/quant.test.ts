/**
 * The quantized-weight and half-weight kernels' C++ unit tests (cuda/test/quant_test.cpp,
 * quant_superblock_test.cpp, half_test.cpp), run twice: on the best instruction set the CPU has
 * and with CTXR_CPU_ISA=avx2 forcing the AVX2 kernels.
 */
import { beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { REPO_ROOT, runProgram } from "../helpers/cli.ts";

setDefaultTimeout(600_000);

const CUDA_DIR = join(REPO_ROOT, "cuda");
const QUANT_TESTS = ["quant.simd_dot_matches_reference", "quant.linear_matches_f32_on_dequantized", "quant.activation_blocks", "quant.isa_paths_agree", "quant.activation_group_kernels_match_one_row", "quant.activation_superblocks", "quant.superblock_activation_kernels", "quant.activation_quantizers_agree", "quant.gemm_matches_row_dots"];
const SUPERBLOCK_TESTS = ["quant_superblock.dequantize_matches_gguf_py", "quant_superblock.gemm_matches_row_dots"];
const HALF_TESTS = ["half.widen_matches_scalar", "half.linear_matches_reference", "half.llama_shapes", "half.backend_in_place"];

beforeAll(() => {
  const build = runProgram(["make", "-C", CUDA_DIR, `-j${availableParallelism()}`, "tests"]);
  if (build.code !== 0) throw new Error(`make -C cuda tests failed:\n${build.stderr}`);
}, 900_000);

for (const isa of [undefined, "avx2"]) {
  test(`quantized and half kernels pass${isa ? ` with CTXR_CPU_ISA=${isa}` : ""}`, () => {
    const result = Bun.spawnSync([join(CUDA_DIR, "build", "runner-tests"), "quant.", "quant_superblock.", "half."], { env: { ...process.env, ...(isa ? { CTXR_CPU_ISA: isa } : {}) }, stdout: "pipe" });
    const out = result.stdout.toString();
    if (result.exitCode !== 0) console.error(out);
    expect(result.exitCode).toBe(0);
    const passed = out.split("\n").flatMap((line) => /^ok (\S+)/.exec(line)?.[1] ?? []);
    expect(passed).toEqual(expect.arrayContaining([...QUANT_TESTS, ...SUPERBLOCK_TESTS, ...HALF_TESTS]));
  });
}
