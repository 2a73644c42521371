/**
 * Test kit for the built-in engine: the real CPU runner (built with
 * `make -C cuda cpu` when missing or stale), the tiny model of the reference
 * fixture written to a temporary folder, and the fixture itself.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { TINY_MODEL_DEFAULTS, tinyModelFiles, type TinyModelOptions } from "../../src/model/tinyModel.ts";
import { writeModelFolder } from "../../src/model/writeModelFolder.ts";
import { REPO_ROOT, tempFolder } from "./cli.ts";
import { runSync } from "../../src/runtime/childProcess.ts";

export const RUNNER_CPU = join(REPO_ROOT, "cuda", "build", "ctxr-runner-cpu");

/** Builds the CPU runner (make is incremental: a no-op when it is up to date); returns its path. */
export function buildRunner(): string {
  const result = runSync(["make", "-C", join(REPO_ROOT, "cuda"), "-j2", "cpu"]);
  if (result.exitCode !== 0) throw new Error(`make -C cuda cpu failed (exit ${result.exitCode}):\n${result.stdout.toString()}\n${result.stderr.toString()}`);
  return RUNNER_CPU;
}

export interface ReferenceFixture {
  prompt_text: string;
  prompt_ids: number[];
  generated_ids: number[];
  model_args: string[];
}

export const TINY_REFERENCE = JSON.parse(readFileSync(join(REPO_ROOT, "test/fixtures/engine/tiny-reference.json"), "utf8")) as ReferenceFixture;

/** The fixture's model: `ctxr model tiny --seed 1`. */
export const TINY_OPTIONS: TinyModelOptions = { ...TINY_MODEL_DEFAULTS, seed: 1 };

/** A temporary folder holding the tiny model (the fixture's unless options say otherwise). */
export function tinyModelFolder(options: Partial<TinyModelOptions> = {}, name = "tiny"): { path: string; cleanup(): void } {
  const folder = tempFolder("ctxr-engine-");
  const path = join(folder.path, name);
  writeModelFolder(path, tinyModelFiles({ ...TINY_OPTIONS, ...options }));
  return { path, cleanup: folder.cleanup };
}
