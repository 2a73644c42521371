/**
 * `npm run build`: the single binary dist/ctxr with the model runner inside.
 * Builds the CPU runner (`make -C cuda cpu`), with --cuda also the CUDA runner
 * (`make -C cuda cuda`, needs nvcc), then compiles src/cli/main.ts with every
 * runner in cuda/build/ as an extra entry point, so the runners become embedded
 * files (Bun.embeddedFiles) that src/runner/runnerExecutable.ts unpacks on first
 * use.
 *
 *   bun scripts/build-binary.ts [--cuda] [--outfile dist/ctxr]
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { WORKER_ENTRIES } from "../src/workerEntries.ts";

const root = resolve(import.meta.dir, "..");
const args = process.argv.slice(2);
const cuda = args.includes("--cuda");
const outIndex = args.indexOf("--outfile");
const outfile = outIndex >= 0 && args[outIndex + 1] !== undefined ? args[outIndex + 1]! : "dist/ctxr";

function run(command: string[]): void {
  console.error(`$ ${command.join(" ")}`);
  const result = Bun.spawnSync(command, { cwd: root, stdout: "inherit", stderr: "inherit" });
  if (result.exitCode !== 0) {
    console.error(`build: \`${command.join(" ")}\` failed (exit ${result.exitCode})`);
    process.exit(result.exitCode ?? 1);
  }
}

if (Bun.which("make") === null) {
  console.error("build: make is not installed; the model runner cannot be built (apt-get install build-essential)");
  process.exit(1);
}
run(["make", "-C", "cuda", "cpu"]);
if (cuda) {
  if (Bun.which(process.env.NVCC ?? "nvcc") === null) {
    console.error("build: --cuda needs nvcc (the CUDA toolkit) on PATH");
    process.exit(1);
  }
  run(["make", "-C", "cuda", "cuda"]);
}

const runners = ["ctxr-runner-cpu", "ctxr-runner-cuda"].map((name) => join("cuda", "build", name)).filter((path) => existsSync(join(root, path)));
run([process.execPath, "build", "src/cli/main.ts", ...WORKER_ENTRIES, ...runners.map((path) => `./${path}`), "--compile", "--minify", "--outfile", outfile]);
console.error(`build: ${outfile} (embedded: ${runners.map((path) => path.split("/").pop()).join(", ")})`);
