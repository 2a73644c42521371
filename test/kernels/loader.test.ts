import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import {
  kernelModuleBytes,
  kernels,
  tsKernels,
  wasmKernelMemoryBytes,
  wasmKernels,
} from "../../src/kernels/index.ts";
import { firstDifference, Random, randomContexts, randomScores } from "./helpers.ts";
import { runtimeName } from "../../src/runtime/runtimeName.ts";

const root = resolve(import.meta.dirname, "../..");

describe("WASM loader", () => {
  test("the module matches its committed sha256", () => {
    const bytes = readFileSync(join(root, "wasm/ctxr_kernels.wasm"));
    const [hash, name] = readFileSync(join(root, "wasm/ctxr_kernels.wasm.sha256"), "utf8").trim().split(/\s+/);
    expect(name).toBe("ctxr_kernels.wasm");
    expect(createHash("sha256").update(bytes).digest("hex")).toBe(hash!);
    expect(Buffer.compare(Buffer.from(kernelModuleBytes()), bytes)).toBe(0);
  });

  test("kernels() is the WASM implementation unless CTXR_KERNELS=ts", () => {
    expect(kernels().name).toBe(process.env.CTXR_KERNELS === "ts" ? "ts" : "wasm");
    expect(wasmKernels()).toBe(wasmKernels());
  });

  test("results stay right across memory growth", () => {
    const w = wasmKernels();
    const rng = new Random(41);
    const small = randomScores(rng, 1000);
    const before = w.topK(small, 10);
    const ctx = randomContexts(rng, 3000, 800, 15); // ~36 MB of distances: memory grows
    const d = w.contextDistances(ctx);
    const pairs = Uint32Array.of(0, 1, 5, 2999, 1234, 17, 2998, 2999);
    expect(firstDifference(tsKernels.contextDistancesForPairs(ctx, pairs), w.contextDistancesForPairs(ctx, pairs))).toBeNull();
    expect(d[0]).toBe(tsKernels.contextDistancesForPairs(ctx, Uint32Array.of(0, 1))[0]!);
    expect(d[d.length - 1]).toBe(tsKernels.contextDistancesForPairs(ctx, Uint32Array.of(2998, 2999))[0]!);
    expect(firstDifference(w.topK(small, 10), before)).toBeNull();
  });

  test("a request beyond wasm32 memory fails clearly and the kernels keep working", () => {
    const w = wasmKernels();
    // 33000 contexts: 544M distances = 4.35 GB, more than wasm32 can address
    const n = 33000;
    const ctx = { flat: new Int32Array(n), offsets: Int32Array.from({ length: n + 1 }, (_, i) => i), blockCount: n };
    expect(() => w.contextLinkage(ctx)).toThrow(/contextLinkage: out of WASM memory/);
    expect(Array.from(w.topK(Float32Array.of(1, 3, 2), 2))).toEqual([1, 2]);
  });

  test("a large call releases the instance afterwards; the next call re-instantiates", () => {
    const w = wasmKernels();
    const rng = new Random(42);
    const ctx = randomContexts(rng, 8300, 2000, 10); // 34.4M distances = 275 MB > 256 MB
    const z = w.contextLinkage(ctx);
    expect(z.length).toBe(4 * 8299);
    expect(z[4 * 8299 - 1]).toBe(8300);
    expect(wasmKernelMemoryBytes()).toBe(0);
    expect(Array.from(w.topK(Float32Array.of(1, 3, 2), 2))).toEqual([1, 2]);
    expect(wasmKernelMemoryBytes()).toBeGreaterThan(0);
    expect(wasmKernelMemoryBytes()).toBeLessThan(64 * 2 ** 20);
  }, 60_000);

  // The single binary is Bun's only (deno compile needs a download).
  test.skipIf(runtimeName !== "bun")("works inside a `bun build --compile` binary run from another folder", () => {
    const dir = mkdtempSync(join(tmpdir(), "ctxr-kernels-compile-"));
    try {
      const entry = join(dir, "entry.ts");
      writeFileSync(
        entry,
        `import { kernels } from ${JSON.stringify(join(root, "src/kernels/index.ts"))};\n` +
          `const k = kernels();\n` +
          `const ctx = { flat: Int32Array.of(3, 5, 1, 7, 2, 6, 3, 5), offsets: Int32Array.of(0, 4, 8), blockCount: 8 };\n` +
          `console.log(JSON.stringify({ name: k.name, d: Array.from(k.contextDistances(ctx)) }));\n`,
      );
      const binary = join(dir, "kernels-check");
      const build = Bun.spawnSync([process.execPath, "build", entry, "--compile", "--outfile", binary], { cwd: root });
      expect(build.exitCode, build.stderr.toString()).toBe(0);
      const runDir = mkdtempSync(join(tmpdir(), "ctxr-kernels-run-"));
      try {
        const run = Bun.spawnSync([binary], { cwd: runDir, env: { PATH: "/usr/bin:/bin" } });
        expect(run.exitCode, run.stderr.toString()).toBe(0);
        expect(JSON.parse(run.stdout.toString())).toEqual({ name: "wasm", d: [0.502] });
      } finally {
        rmSync(runDir, { recursive: true, force: true });
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
