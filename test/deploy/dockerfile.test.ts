/**
 * deploy/Dockerfile, checked without Docker (no daemon here): its stages and their references,
 * its build stage replayed in a temporary folder (its COPYs from this repository, then its RUNs;
 * only `npm ci` is replaced, by this checkout's node_modules, and the CPU runner's objects are
 * carried over so make has nothing to recompile: test/runner builds the runner), the shared
 * libraries of what the runtime stage holds against the packages it installs, and the image's
 * CMD and HEALTHCHECK run against the binary the replay built.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { cpSync, existsSync, mkdirSync, readFileSync, realpathSync, statSync, symlinkSync } from "node:fs";
import { join, relative } from "node:path";
import { REPO_ROOT, runProgram, tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { freeTcpPort } from "../helpers/freeTcpPort.ts";
import { until } from "../helpers/testLifecycle.ts";
import { spawnPiped, which } from "../../src/runtime/childProcess.ts";
import { aptInstalled, execForm, instructionsOf, parseCopy, parseDockerfile, type Stage } from "./dockerfile.ts";
import { documentedServeFlags, flagsUsed } from "./serveFlags.ts";

setDefaultTimeout(60_000);

const DOCKERFILE = join(REPO_ROOT, "deploy/Dockerfile");
const stages = parseDockerfile(readFileSync(DOCKERFILE, "utf8"));
const runtime = stages.at(-1)!;
const build = stages[0]!;

function only(stage: Stage, keyword: string): string {
  const found = instructionsOf(stage, keyword);
  if (found.length !== 1) throw new Error(`the runtime stage needs exactly one ${keyword}, has ${found.length}`);
  return found[0]!.text;
}

const entrypoint = execForm(instructionsOf(runtime, "ENTRYPOINT")[0]!)!;
const cmd = execForm(instructionsOf(runtime, "CMD")[0]!)!;
const flagValue = (argv: string[], flag: string) => argv[argv.indexOf(flag) + 1];

/** Patterns of deploy/Dockerfile.dockerignore: what `docker build` leaves out of the context. */
const ignored = readFileSync(join(REPO_ROOT, "deploy/Dockerfile.dockerignore"), "utf8")
  .split("\n")
  .map((line) => line.trim())
  .filter((line) => line !== "" && !line.startsWith("#"));
const isIgnored = (path: string) => ignored.some((pattern) => new Bun.Glob(pattern).match(path) || path === pattern || path.startsWith(`${pattern}/`));

describe("deploy/Dockerfile", () => {
  test("a named build stage, and a runtime stage on a plain base that copies only from it", () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    const names = stages.map((stage) => stage.name);
    expect(build.name).not.toBeNull();
    expect(names).not.toContain(runtime.base); // the runtime starts from a base image, not from the build
    stages.forEach((stage, index) => {
      for (const copy of instructionsOf(stage, "COPY").map(parseCopy)) {
        if (copy.from !== null) expect(names.slice(0, index)).toContain(copy.from);
      }
    });
    const runtimeCopies = instructionsOf(runtime, "COPY").map(parseCopy);
    expect(runtimeCopies.length).toBeGreaterThan(0);
    expect(runtimeCopies.every((copy) => copy.from === build.name)).toBe(true);
  });

  test("every COPY from the context names a file or folder of this repository that .dockerignore keeps", () => {
    const problems: string[] = [];
    for (const stage of stages) {
      for (const copy of instructionsOf(stage, "COPY").map(parseCopy)) {
        if (copy.from !== null) continue;
        for (const source of copy.sources) {
          const path = relative(REPO_ROOT, join(REPO_ROOT, source));
          if (!existsSync(join(REPO_ROOT, path))) problems.push(`${source}: not in the repository`);
          else if (isIgnored(path)) problems.push(`${source}: excluded by deploy/Dockerfile.dockerignore`);
        }
      }
    }
    expect(problems).toEqual([]);
  });

  test("runs as a user that is not root, with the data and cache folders as volumes", () => {
    const user = instructionsOf(runtime, "USER").at(-1)?.text ?? "root";
    expect(["root", "0"]).not.toContain(user.split(":")[0]);
    const volumes = execForm(instructionsOf(runtime, "VOLUME")[0]!)!;
    const cacheHome = /^XDG_CACHE_HOME=(\S+)$/.exec(instructionsOf(runtime, "ENV").map((env) => env.text).find((text) => text.startsWith("XDG_CACHE_HOME=")) ?? "")?.[1];
    expect(cacheHome).toBeDefined();
    // ctxr keeps its cache (the unpacked runner, models named hf:...) in $XDG_CACHE_HOME/ctxr.
    expect(volumes.sort()).toEqual([flagValue(cmd, "--data-dir")!, `${cacheHome}/ctxr`].sort());
  });

  test("ENTRYPOINT is the copied binary and CMD uses real serve flags on the EXPOSEd port", () => {
    const binary = parseCopy(instructionsOf(runtime, "COPY")[0]!).destination;
    expect(entrypoint).toEqual([binary]);
    expect(cmd[0]).toBe("serve");
    expect(flagsUsed(cmd).filter((flag) => !documentedServeFlags().has(flag))).toEqual([]);
    expect(flagValue(cmd, "--host")).toBe("0.0.0.0");
    expect(only(runtime, "EXPOSE")).toBe(flagValue(cmd, "--port"));
    const healthcheck = only(runtime, "HEALTHCHECK");
    expect(healthcheck).toContain(`http://127.0.0.1:${flagValue(cmd, "--port")}/health`);
  });
});

describe("deploy/Dockerfile, its build stage replayed", () => {
  let folder: { path: string; cleanup(): void };
  let stageRoot = "";
  let log = "";
  const inStage = (path: string) => join(stageRoot, path);

  beforeAll(() => {
    buildRunner(); // this checkout's CPU runner, whose objects the replay carries over (a no-op when built)
    folder = tempFolder("ctxr-docker-");
    stageRoot = join(folder.path, "build");
    let workdir = "/";
    for (const instruction of build.instructions) {
      if (instruction.keyword === "WORKDIR") {
        workdir = join(workdir, instruction.text);
        mkdirSync(inStage(workdir), { recursive: true });
      } else if (instruction.keyword === "COPY") {
        const copy = parseCopy(instruction);
        for (const source of copy.sources) {
          const from = join(REPO_ROOT, source);
          const into = copy.destination.endsWith("/") ? join(inStage(workdir), copy.destination, source.split("/").pop()!) : join(inStage(workdir), copy.destination);
          cpSync(from, into, { recursive: true, preserveTimestamps: true, filter: (path) => !isIgnored(relative(REPO_ROOT, path)) });
        }
        if (copy.sources.includes("cuda")) {
          // The runner's objects as this checkout built them, so make finds the CPU runner up to date.
          cpSync(join(REPO_ROOT, "cuda/build/cpu"), join(inStage(workdir), "cuda/build/cpu"), { recursive: true, preserveTimestamps: true });
          cpSync(join(REPO_ROOT, "cuda/build/ctxr-runner-cpu"), join(inStage(workdir), "cuda/build/ctxr-runner-cpu"), { preserveTimestamps: true });
        }
      } else if (instruction.keyword === "RUN") {
        if (/^npm ci\b/.test(instruction.text)) {
          symlinkSync(join(REPO_ROOT, "node_modules"), join(inStage(workdir), "node_modules"));
          continue;
        }
        const run = runProgram(["sh", "-c", instruction.text], { cwd: inStage(workdir) });
        log += `RUN ${instruction.text}: exit ${run.code}\n${run.stdout}${run.stderr}\n`;
        if (run.code !== 0) return;
      } else if (instruction.keyword !== "ARG" && instruction.keyword !== "ENV") {
        throw new Error(`the replay does not know ${instruction.keyword} (Dockerfile line ${instruction.line})`);
      }
    }
  }, 300_000);
  afterAll(() => folder?.cleanup());

  const copiedBinary = () => inStage(parseCopy(instructionsOf(runtime, "COPY")[0]!).sources[0]!);

  test("yields the binary the runtime stage copies", () => {
    if (!existsSync(copiedBinary())) console.error(log);
    expect(existsSync(copiedBinary())).toBe(true);
    expect(statSync(copiedBinary()).mode & 0o111).not.toBe(0);
  });

  test("the runtime stage installs every package whose libraries the binary and its runner link", () => {
    const libraries = new Set<string>();
    for (const executable of [copiedBinary(), join(REPO_ROOT, "cuda/build/ctxr-runner-cpu")]) {
      const ldd = runProgram(["ldd", executable]);
      expect(ldd.code).toBe(0);
      for (const match of ldd.stdout.matchAll(/=>\s+(\/\S+)/g)) libraries.add(match[1]!);
    }
    const packageOf = (path: string): string => {
      for (const candidate of [path, realpathSync(path), `/usr${path}`]) {
        const owner = runProgram(["dpkg", "-S", candidate]);
        if (owner.code === 0) return owner.stdout.split(":")[0]!;
      }
      throw new Error(`dpkg -S: no package holds ${path}`);
    };
    const needed = new Set([...libraries].map(packageOf));
    needed.delete("libc6"); // every Debian image has it
    const installed = instructionsOf(runtime, "RUN").flatMap((run) => aptInstalled(run.text));
    expect([...needed].filter((name) => !installed.includes(name))).toEqual([]);
    expect(needed.size).toBeGreaterThan(0);
  });

  test("CMD starts a server that the HEALTHCHECK finds healthy", async () => {
    if (which("curl") === null) throw new Error("curl is not installed: the HEALTHCHECK runs it");
    const port = String(await freeTcpPort());
    const data = join(folder.path, "data");
    const argv = cmd.map((word, index) => (cmd[index - 1] === "--port" ? port : cmd[index - 1] === "--data-dir" ? data : word));
    const server = spawnPiped([copiedBinary(), ...argv], { cwd: folder.path, env: { ...process.env, XDG_CACHE_HOME: join(folder.path, "cache") } });
    try {
      const healthcheck = only(runtime, "HEALTHCHECK").replace(/^.*?\bCMD\s+/, "").replaceAll(`:${flagValue(cmd, "--port")}/`, `:${port}/`);
      await until(() => runProgram(["sh", "-c", healthcheck]).code === 0, "the HEALTHCHECK to pass", 30_000, 200);
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
      expect(existsSync(data)).toBe(true);
    } finally {
      server.kill("SIGKILL");
    }
  });
});
