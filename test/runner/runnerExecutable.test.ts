/**
 * Finding the runner: $CTXR_RUNNER, the source tree's cuda/build, and the copy
 * embedded in the single binary, unpacked once (atomically, mode 0755) into the
 * cache folder. The last test builds the binary as `npm run build` does and
 * serves the tiny model from it, in a folder with nothing else.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  RunnerNotFoundError,
  embeddedRunner,
  findRunner,
  runnerCacheRoot,
  runnerFlavor,
  unpackRunner,
  type EmbeddedFile,
} from "../../src/runner/runnerExecutable.ts";
import { loadModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { REPO_ROOT, runProgram, tempFolder } from "../helpers/cli.ts";
import { TINY_REFERENCE, buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

let runner = "";
const folder = tempFolder("ctxr-runner-exe-");
beforeAll(() => {
  runner = buildRunner();
}, 300_000);
afterAll(() => folder.cleanup());

const fileOf = (name: string, bytes: Uint8Array): EmbeddedFile => ({ name, bytes: async () => bytes });

describe("findRunner", () => {
  test("flavors", () => {
    expect(runnerFlavor("cpu")).toBe("cpu");
    expect(runnerFlavor("cuda")).toBe("cuda");
    expect(runnerFlavor("cuda:1")).toBe("cuda");
  });

  test("$CTXR_RUNNER wins and must be executable", async () => {
    expect(await findRunner("cpu", { env: { CTXR_RUNNER: runner } })).toBe(runner);
    const plain = join(folder.path, "not-executable");
    writeFileSync(plain, "x", { mode: 0o644 });
    await expect(findRunner("cpu", { env: { CTXR_RUNNER: plain } })).rejects.toThrow(/CTXR_RUNNER=.*not an executable file/);
    await expect(findRunner("cpu", { env: { CTXR_RUNNER: join(folder.path, "missing") } })).rejects.toBeInstanceOf(RunnerNotFoundError);
  });

  test("from the source tree: cuda/build/ctxr-runner-cpu", async () => {
    expect(await findRunner("cpu", { env: {}, sourceRoot: REPO_ROOT })).toBe(runner);
  });

  test("a source tree without a build, not allowed to build: says how to build", async () => {
    const root = join(folder.path, "tree");
    mkdirSync(join(root, "cuda"), { recursive: true });
    await expect(findRunner("cpu", { env: {}, sourceRoot: root, build: false })).rejects.toThrow(/make -C cuda cpu/);
  });

  test("a source tree whose build fails: make's output", async () => {
    const root = join(folder.path, "broken-tree");
    mkdirSync(join(root, "cuda"), { recursive: true });
    writeFileSync(join(root, "cuda", "Makefile"), "cpu:\n\t@echo the compiler is unhappy >&2; exit 3\n");
    await expect(findRunner("cpu", { env: {}, sourceRoot: root })).rejects.toThrow(/`make -C cuda cpu` failed \(exit 2\):\n.*the compiler is unhappy/s);
  });

  test("a binary without an embedded runner says so", async () => {
    await expect(findRunner("cpu", { env: {}, sourceRoot: null, embedded: [] })).rejects.toThrow(/carries no model runner/);
    await expect(findRunner("cuda", { env: {}, sourceRoot: null, embedded: [fileOf("ctxr-runner-cpu-abc123.", new Uint8Array(1))] })).rejects.toThrow(/no CUDA runner/);
  });
});

describe("embedded runners", () => {
  test("found by name, with or without the bundler's hash; cpu falls back to the CUDA build", () => {
    const cpu = fileOf("ctxr-runner-cpu-p5ak8a34.", new Uint8Array(1));
    const cuda = fileOf("ctxr-runner-cuda.", new Uint8Array(1));
    const wasm = fileOf("ctxr_kernels-1a2b3c.wasm", new Uint8Array(1));
    expect(embeddedRunner([wasm, cpu, cuda], "cpu")).toBe(cpu);
    expect(embeddedRunner([wasm, cpu, cuda], "cuda")).toBe(cuda);
    expect(embeddedRunner([wasm, cuda], "cpu")).toBe(cuda);
    expect(embeddedRunner([wasm, cpu], "cuda")).toBeNull();
    expect(embeddedRunner([fileOf("ctxr-runner-cpu-x.txt", new Uint8Array(1))], "cpu")).toBeNull();
  });

  test("the cache folder: $XDG_CACHE_HOME/ctxr, else ~/.cache/ctxr", () => {
    expect(runnerCacheRoot({ XDG_CACHE_HOME: "/x/cache", HOME: "/home/u" })).toBe("/x/cache/ctxr");
    expect(runnerCacheRoot({ XDG_CACHE_HOME: "", HOME: "/home/u" })).toBe("/home/u/.cache/ctxr");
  });

  test("unpacked once into runner-<sha256 prefix>/, mode 0755, and it runs", async () => {
    const cache = join(folder.path, "cache");
    const bytes = new Uint8Array(readFileSync(runner));
    const file = fileOf("ctxr-runner-cpu-zz9.", bytes);
    const logs: string[] = [];
    const path = await unpackRunner(file, cache, (line) => logs.push(line));
    const digest = new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
    expect(path).toBe(join(cache, `runner-${digest.slice(0, 16)}`, "ctxr-runner-cpu"));
    expect(statSync(path).mode & 0o777).toBe(0o755);
    expect(readFileSync(path).equals(Buffer.from(bytes))).toBe(true);
    expect(logs).toEqual([`ctxr: unpacked the model runner to ${path}`]);
    // Second time: nothing written.
    expect(await unpackRunner(file, cache, (line) => logs.push(line))).toBe(path);
    expect(logs.length).toBe(1);
    // Concurrent first uses agree and leave no temporary files.
    const other = join(folder.path, "cache2");
    const paths = await Promise.all(Array.from({ length: 5 }, () => unpackRunner(file, other)));
    expect(new Set(paths).size).toBe(1);
    expect(readdirSync(join(paths[0]!, ".."))).toEqual(["ctxr-runner-cpu"]);
    // It is the runner.
    const peak = runProgram([path, "--peak-gflops", "--threads", "1", "--seconds", "0.05"]);
    expect(peak.code).toBe(0);
  });

  test("a damaged cached copy is replaced; other content goes to another folder", async () => {
    const cache = join(folder.path, "cache3");
    const file = fileOf("ctxr-runner-cpu.", new TextEncoder().encode("#!/bin/sh\necho one\n"));
    const path = await unpackRunner(file, cache);
    writeFileSync(path, "#!/bin/sh\necho tampered\n");
    chmodSync(path, 0o755);
    expect(await unpackRunner(file, cache)).toBe(path);
    expect(readFileSync(path, "utf8")).toBe("#!/bin/sh\necho one\n");
    const second = await unpackRunner(fileOf("ctxr-runner-cpu.", new TextEncoder().encode("#!/bin/sh\necho two\n")), cache);
    expect(second).not.toBe(path);
    expect(existsSync(path)).toBe(true);
  });

  test("an unwritable cache folder is a clear error", async () => {
    const blocked = join(folder.path, "blocked");
    writeFileSync(blocked, "a file where the folder should be");
    await expect(unpackRunner(fileOf("ctxr-runner-cpu.", new Uint8Array(4)), join(blocked, "ctxr"))).rejects.toThrow(/cannot create .* to unpack the model runner/);
  });
});

describe("the single binary (npm run build)", () => {
  test("embeds the runner, unpacks it on first use and serves a model from any folder", async () => {
    const build = join(folder.path, "build");
    const binary = join(build, "ctxr");
    const built = runProgram([process.execPath, join(REPO_ROOT, "scripts/build-binary.ts"), "--outfile", binary]);
    expect(built.code, built.stderr).toBe(0);
    expect(built.stderr).toContain("embedded: ctxr-runner-cpu");

    const run = join(folder.path, "run");
    mkdirSync(run);
    const copy = join(run, "ctxr");
    copyFileSync(binary, copy);
    chmodSync(copy, 0o755);
    const model = tinyModelFolder();
    const cache = join(run, "cache");
    const env: Record<string, string> = { PATH: "/usr/bin:/bin", HOME: run, XDG_CACHE_HOME: cache, NO_COLOR: "1" };
    const child = Bun.spawn([copy, "serve", "--in-memory", "--port", "0", "--model", model.path, "--kv-blocks", "16", "--threads", "1"], { cwd: run, env, stdout: "pipe", stderr: "pipe" });
    try {
      const reader = child.stdout.getReader();
      let out = "";
      let url: string | null = null;
      const deadline = Date.now() + 60_000;
      while (url === null && Date.now() < deadline) {
        const { done, value } = await reader.read();
        if (done) break;
        out += new TextDecoder().decode(value);
        url = /listening on (http:\/\/\S+)/.exec(out)?.[1] ?? null;
      }
      if (url === null) throw new Error(`the binary did not start: ${out}\n${await new Response(child.stderr).text()}`);
      const answer = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: TINY_REFERENCE.prompt_ids, max_tokens: 8, temperature: 0, logprobs: 0 }),
      }).then((r) => r.json() as Promise<any>);
      const tokenizer = await loadModelTokenizer(model.path);
      expect(answer.choices[0].text).toBe(tokenizer.decode(TINY_REFERENCE.generated_ids));
      expect(answer.choices[0].logprobs.tokens.length).toBe(8);
      const unpacked = readdirSync(join(cache, "ctxr"));
      expect(unpacked.length).toBe(1);
      expect(unpacked[0]).toMatch(/^runner-[0-9a-f]{16}$/);
      expect(statSync(join(cache, "ctxr", unpacked[0]!, "ctxr-runner-cpu")).mode & 0o777).toBe(0o755);
    } finally {
      child.kill("SIGTERM");
      await child.exited;
      model.cleanup();
    }
  }, 300_000);
});
