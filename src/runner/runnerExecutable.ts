/**
 * Finds the ctxr-runner executable for a device:
 *
 * 1. $CTXR_RUNNER, when set (it must be an executable file);
 * 2. from the source tree: cuda/build/ctxr-runner-{cpu,cuda}, built with
 *    `make -C cuda cpu` (or `cuda`) first when missing and make and a compiler
 *    are there;
 * 3. inside the single binary (`npm run build`): the runner embedded in it
 *    (Bun.embeddedFiles), unpacked on first use into
 *    $XDG_CACHE_HOME/ctxr/runner-<sha256 prefix>/ (default ~/.cache), with mode
 *    0755, through a temporary file and a rename, so concurrent starts never see
 *    a partial file.
 *
 * The CUDA build includes the CPU backend, so `cpu` falls back to it; `cuda`
 * needs it.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { writeAll, writeFileAtomically } from "../files/atomicFile.ts";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { embeddedFiles, isStandaloneExecutable, type EmbeddedFile } from "../runtime/embeddedFiles.ts";
import { runSync, which } from "../runtime/childProcess.ts";
import { isExecutableFile } from "../runtime/executableFile.ts";

export type RunnerFlavor = "cpu" | "cuda";

/** The runner build a --device value needs: "cpu" → cpu, "cuda" / "cuda:N" → cuda. */
export function runnerFlavor(device: string): RunnerFlavor {
  return device === "cpu" ? "cpu" : "cuda";
}

export function runnerFileName(flavor: RunnerFlavor): string {
  return `ctxr-runner-${flavor}`;
}

/** The runner cannot be found or built; the message says what to do. */
export class RunnerNotFoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RunnerNotFoundError";
  }
}

export type { EmbeddedFile };

export interface FindRunnerOptions {
  /** Default: process.env. */
  env?: Record<string, string | undefined>;
  /** Repository root whose cuda/ holds the runner sources (default: this source tree's, when it has one). */
  sourceRoot?: string | null;
  /** Files embedded in the single binary (default: Bun.embeddedFiles). */
  embedded?: readonly EmbeddedFile[];
  /** Build from source when the runner is missing (default true). */
  build?: boolean;
  /** Progress lines (builds, unpacking). */
  log?: (line: string) => void;
}

/** The repository root when running from source (src/engine/ → ../..), else null. */
export function defaultSourceRoot(): string | null {
  if (isStandaloneExecutable()) return null;
  const root = resolve(import.meta.dirname, "../..");
  return existsSync(join(root, "cuda", "Makefile")) ? root : null;
}

/** Finds (building or unpacking when needed) the runner for `device`; returns its path. */
export async function findRunner(device: string, options: FindRunnerOptions = {}): Promise<string> {
  const env = options.env ?? process.env;
  const flavor = runnerFlavor(device);
  const fromEnv = env.CTXR_RUNNER;
  if (fromEnv !== undefined && fromEnv !== "") {
    if (!isExecutableFile(fromEnv)) throw new RunnerNotFoundError(`CTXR_RUNNER=${fromEnv} is not an executable file`);
    return resolve(fromEnv);
  }

  const sourceRoot = options.sourceRoot === undefined ? defaultSourceRoot() : options.sourceRoot;
  if (sourceRoot !== null) return sourceRunner(sourceRoot, flavor, options);

  const embedded = options.embedded ?? embeddedFiles();
  const file = embeddedRunner(embedded, flavor);
  if (file === null) {
    throw new RunnerNotFoundError(
      flavor === "cuda"
        ? "this ctxr binary carries no CUDA runner (build it with `npm run build:cuda` on a machine with nvcc), or set CTXR_RUNNER to a ctxr-runner-cuda executable"
        : "this ctxr binary carries no model runner (build it with `npm run build`), or set CTXR_RUNNER to a ctxr-runner executable",
    );
  }
  return unpackRunner(file, runnerCacheRoot(env), options.log);
}

/** cuda/build/ctxr-runner-<flavor> of a source tree, built first when missing. */
function sourceRunner(root: string, flavor: RunnerFlavor, options: FindRunnerOptions): string {
  const build = join(root, "cuda", "build");
  const wanted = join(build, runnerFileName(flavor));
  if (isExecutableFile(wanted)) return wanted;
  // The CUDA build has the CPU backend too.
  if (flavor === "cpu" && isExecutableFile(join(build, runnerFileName("cuda")))) return join(build, runnerFileName("cuda"));
  if (options.build === false) throw new RunnerNotFoundError(`${wanted} is missing; build it with \`make -C cuda ${flavor}\``);
  const tools = flavor === "cpu" ? ["make", "g++"] : ["make", "g++", "nvcc"];
  const missing = tools.filter((tool) => which(tool) === null);
  if (missing.length > 0) {
    throw new RunnerNotFoundError(
      `${wanted} is missing and cannot be built here: ${missing.join(" and ")} ${missing.length === 1 ? "is" : "are"} not installed ` +
        `(install ${flavor === "cpu" ? "make and g++ (apt-get install build-essential)" : "make, g++ and the CUDA toolkit"}, then run \`make -C cuda ${flavor}\`), or set CTXR_RUNNER`,
    );
  }
  options.log?.(`ctxr: building the model runner: make -C cuda ${flavor}`);
  const result = runSync(["make", "-C", join(root, "cuda"), flavor]);
  if (result.exitCode !== 0 || !isExecutableFile(wanted)) {
    const output = (result.stderr + result.stdout).trim().split("\n").slice(-15).join("\n");
    throw new RunnerNotFoundError(`\`make -C cuda ${flavor}\` failed (exit ${result.exitCode}):\n${output}`);
  }
  return wanted;
}

/** The embedded runner for a flavor (cpu falls back to cuda), or null. */
export function embeddedRunner(files: readonly EmbeddedFile[], flavor: RunnerFlavor): EmbeddedFile | null {
  const find = (f: RunnerFlavor) => {
    const pattern = new RegExp(`^${runnerFileName(f)}(-[A-Za-z0-9]+)?\\.?$`);
    return files.find((file) => pattern.test(file.name)) ?? null;
  };
  return find(flavor) ?? (flavor === "cpu" ? find("cuda") : null);
}

/** $XDG_CACHE_HOME/ctxr, default ~/.cache/ctxr. */
export function runnerCacheRoot(env: Record<string, string | undefined> = process.env): string {
  const xdg = env.XDG_CACHE_HOME;
  const base = xdg !== undefined && xdg !== "" ? xdg : join(env.HOME && env.HOME !== "" ? env.HOME : homedir(), ".cache");
  return join(base, "ctxr");
}

/** The runner's name without the bundler's hash: ctxr-runner-cpu or ctxr-runner-cuda. */
function plainName(file: EmbeddedFile): string {
  return /^(ctxr-runner-(cpu|cuda))/.exec(file.name)?.[1] ?? "ctxr-runner";
}

/**
 * Writes an embedded runner to <cacheRoot>/runner-<sha256[0:16]>/<name> unless a
 * file with the same content is already there; returns its path.
 */
export async function unpackRunner(file: EmbeddedFile, cacheRoot: string, log?: (line: string) => void): Promise<string> {
  const bytes = await file.bytes();
  const digest = createHash("sha256").update(bytes).digest("hex");
  const folder = join(cacheRoot, `runner-${digest.slice(0, 16)}`);
  const target = join(folder, plainName(file));
  if (isExecutableFile(target)) {
    try {
      if (statSync(target).size === bytes.length && createHash("sha256").update(readFileSync(target)).digest("hex") === digest) return target;
    } catch {
      // rewrite it
    }
  }
  try {
    mkdirSync(folder, { recursive: true, mode: 0o755 });
  } catch (error) {
    throw new RunnerNotFoundError(`cannot create ${folder} to unpack the model runner: ${(error as Error).message} (set XDG_CACHE_HOME to a writable folder, or CTXR_RUNNER)`);
  }
  try {
    writeFileAtomically(target, (fd) => writeAll(fd, bytes), { mode: 0o755 });
  } catch (error) {
    throw new RunnerNotFoundError(`cannot unpack the model runner to ${target}: ${(error as Error).message}`);
  }
  log?.(`ctxr: unpacked the model runner to ${target}`);
  return target;
}
