/**
 * A GGUF model split in parts (llama.cpp's gguf-split layout, written by llama.cpp's own gguf-py:
 * scripts/oracle/random_gguf.py --split-max-tensors): the runner loads the whole model from its
 * first part and computes the unsplit file's log-probabilities, bit for bit, and llama.cpp's on the
 * same parts; parts that do not belong together are refused with a message naming the file.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { ctxrLogprobs, llamaLogprobs, writeRandomGguf } from "../helpers/llamaOracle.ts";
import { rowsDifference } from "../helpers/logprobRows.ts";

setDefaultTimeout(240_000);

const SHAPE = { hidden: 64, heads: 4, kvHeads: 2, ffn: 128, layers: 2, seed: 7 };
// 2 layers × 9 tensors + embedding, norm and output: 21 tensors, three parts of at most 8.
const SPLIT = ["--split-max-tensors", "8"];
const ids = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 256);

let scratch: { path: string; cleanup(): void };
let runner: string;
let whole: string;
let first: string;
const partName = (folder: string, prefix: string, no: number, count: number) => join(folder, `${prefix}-${String(no).padStart(5, "0")}-of-${String(count).padStart(5, "0")}.gguf`);

beforeAll(() => {
  runner = buildRunner();
  scratch = tempFolder("ctxr-gguf-split-");
  whole = writeRandomGguf("llama", join(scratch.path, "whole.gguf"), SHAPE);
  writeRandomGguf("llama", join(scratch.path, "split.gguf"), { ...SHAPE, extraArgs: SPLIT });
  first = partName(scratch.path, "split", 1, 3);
});
afterAll(() => scratch.cleanup());

/** The message the runner fails to start with. */
async function loadError(model: string): Promise<string> {
  try {
    const process = await RunnerProcess.start({ executable: runner, model, blocks: 4, blockSize: 16, threads: 1 });
    await process.shutdown();
  } catch (error) {
    return (error as Error).message;
  }
  return "(it loaded)";
}

/** A folder holding copies of the split's parts, for tampering with. */
function copyOfParts(name: string): string {
  const folder = join(scratch.path, name);
  mkdirSync(folder);
  for (let no = 1; no <= 3; no++) copyFileSync(partName(scratch.path, "split", no, 3), partName(folder, "split", no, 3));
  return folder;
}

describe("a split GGUF model", () => {
  test("gguf-py wrote three parts", () => {
    expect(readdirSync(scratch.path).filter((name) => name.startsWith("split-")).sort()).toEqual(["split-00001-of-00003.gguf", "split-00002-of-00003.gguf", "split-00003-of-00003.gguf"]);
  });

  test("loaded from its first part, it gives the unsplit file's log-probabilities exactly, and llama.cpp's", async () => {
    const split = await ctxrLogprobs(runner, first, ids, 30);
    const unsplit = await ctxrLogprobs(runner, whole, ids, 30);
    expect(split.vocab).toBe(unsplit.vocab);
    expect(rowsDifference(split.rows, unsplit.rows, split.vocab).max).toBe(0);
    const llama = llamaLogprobs(first, ids, scratch.path);
    const difference = rowsDifference(split.rows, llama.rows, llama.vocab);
    expect(difference.max).toBeLessThan(1e-2);
    expect(difference.mean).toBeLessThan(1.5e-3);
  });

  test("a missing part, a later part given first, and a renamed first part are refused naming the file", async () => {
    const missing = copyOfParts("missing");
    rmSync(partName(missing, "split", 2, 3));
    expect(await loadError(partName(missing, "split", 1, 3))).toContain(`part 2 of 3 of this split model is missing: ${partName(missing, "split", 2, 3)}`);

    expect(await loadError(partName(scratch.path, "split", 2, 3))).toContain(
      `${partName(scratch.path, "split", 2, 3)}: this is part 2 of 3 of a split model; give --model its first part, ${first}`,
    );

    const renamed = copyOfParts("renamed");
    renameSync(partName(renamed, "split", 1, 3), join(renamed, "model.gguf"));
    expect(await loadError(join(renamed, "model.gguf"))).toContain("its split.count says the model is split in 3 parts, but the file is not named as the first of them (PREFIX-00001-of-00003.gguf");
  });

  test("a part of another split (another count, another model) is refused", async () => {
    // The same model in two parts: its second part is not the second of three.
    writeRandomGguf("llama", join(scratch.path, "halves.gguf"), { ...SHAPE, extraArgs: ["--split-max-tensors", "11"] });
    const mixed = copyOfParts("mixed");
    copyFileSync(partName(scratch.path, "halves", 2, 2), partName(mixed, "split", 2, 3));
    expect(await loadError(partName(mixed, "split", 1, 3))).toMatch(/split-00002-of-00003\.gguf: not part 2 of .*split-00001-of-00003\.gguf's split: its split\.no \/ split\.count \/ split\.tensors\.count are 1 \/ 2 \/ 21, expected 1 \/ 3 \/ 21/);

    // A three-layer model split in three: its parts' tensor counts are not this model's.
    writeRandomGguf("llama", join(scratch.path, "deeper.gguf"), { ...SHAPE, layers: 3, extraArgs: ["--split-max-tensors", "11"] });
    const other = copyOfParts("other");
    copyFileSync(partName(scratch.path, "deeper", 3, 3), partName(other, "split", 3, 3));
    expect(await loadError(partName(other, "split", 1, 3))).toMatch(/split-00003-of-00003\.gguf: not part 3 of .* are 2 \/ 3 \/ 30, expected 2 \/ 3 \/ 21/);
  });
});
