/**
 * The server's side of a split GGUF model (src/model/gguf/ggufSplit.ts) on parts written by
 * llama.cpp's own gguf-py (scripts/oracle/random_gguf.py --split-max-tensors): the parts' headers,
 * the whole tensor list, the refusals (the runner's checks, before it starts), and an identity that
 * covers every part.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ggufModelIdentity } from "../../../src/kv/modelIdentity.ts";
import { ggufModelTensors, ggufSplitPartPaths, readGgufParts } from "../../../src/model/gguf/ggufSplit.ts";
import { readGgufFile } from "../../../src/model/gguf/ggufReader.ts";
import { tempFolder } from "../../helpers/cli.ts";
import { writeRandomGguf } from "../../helpers/llamaOracle.ts";

setDefaultTimeout(120_000);

const SHAPE = { hidden: 64, heads: 4, kvHeads: 2, ffn: 128, layers: 2, seed: 7 };
let scratch: { path: string; cleanup(): void };
let whole: string;
const part = (folder: string, prefix: string, no: number, count: number) => join(folder, `${prefix}-${String(no).padStart(5, "0")}-of-${String(count).padStart(5, "0")}.gguf`);

beforeAll(() => {
  scratch = tempFolder("ctxr-gguf-split-ts-");
  whole = writeRandomGguf("llama", join(scratch.path, "whole.gguf"), SHAPE);
  writeRandomGguf("llama", join(scratch.path, "split.gguf"), { ...SHAPE, extraArgs: ["--split-max-tensors", "8"] });
  writeRandomGguf("llama", join(scratch.path, "halves.gguf"), { ...SHAPE, extraArgs: ["--split-max-tensors", "11"] });
});
afterAll(() => scratch.cleanup());

describe("readGgufParts", () => {
  test("a one-file model is one part; a split one its parts in order, holding the unsplit file's tensors", () => {
    expect(readGgufParts(whole).map((entry) => entry.path)).toEqual([whole]);
    const parts = readGgufParts(part(scratch.path, "split", 1, 3));
    expect(parts.map((entry) => entry.path)).toEqual([1, 2, 3].map((no) => part(scratch.path, "split", no, 3)));
    const tensors = ggufModelTensors(parts).map((tensor) => `${tensor.name} ${tensor.dims.join("x")} ${tensor.type}`).sort();
    expect(tensors).toEqual(readGgufFile(whole).tensors.map((tensor) => `${tensor.name} ${tensor.dims.join("x")} ${tensor.type}`).sort());
    expect(parts[1]!.header.metadata.has("general.architecture")).toBe(false); // gguf-py: metadata in the first part only
  });

  test("the part names follow llama.cpp's pattern", () => {
    expect(ggufSplitPartPaths("/m/x-00001-of-00002.gguf", 2)).toEqual(["/m/x-00001-of-00002.gguf", "/m/x-00002-of-00002.gguf"]);
    expect(() => ggufSplitPartPaths("/m/x.gguf", 2)).toThrow("/m/x.gguf: its split.count says the model is split in 2 parts, but the file is not named as the first of them (PREFIX-00001-of-00002.gguf");
  });

  test("a missing part, a later part given first, a part of another split are refused naming the file", () => {
    const folder = join(scratch.path, "tampered");
    mkdirSync(folder);
    for (const no of [1, 2, 3]) copyFileSync(part(scratch.path, "split", no, 3), part(folder, "split", no, 3));
    expect(() => readGgufParts(part(folder, "split", 2, 3))).toThrow(`this is part 2 of 3 of a split model; give --model its first part, ${part(folder, "split", 1, 3)}`);
    copyFileSync(part(scratch.path, "halves", 2, 2), part(folder, "split", 2, 3));
    expect(() => readGgufParts(part(folder, "split", 1, 3))).toThrow("split.no / split.count / split.tensors.count are 1 / 2 / 21, expected 1 / 3 / 21");
    rmSync(part(folder, "split", 3, 3));
    copyFileSync(part(scratch.path, "split", 2, 3), part(folder, "split", 2, 3));
    expect(() => readGgufParts(part(folder, "split", 1, 3))).toThrow(`part 3 of 3 of this split model is missing: ${part(folder, "split", 3, 3)}`);
  });
});

describe("ggufModelIdentity of a split model", () => {
  test("covers every part: another second part changes it; a one-file model's stays what it was", async () => {
    const first = part(scratch.path, "split", 1, 3);
    const others = (parts: ReturnType<typeof readGgufParts>) => parts.slice(1).map((entry) => ({ path: entry.path, dataStart: entry.header.dataStart }));
    const parts = readGgufParts(first);
    const identity = await ggufModelIdentity(first, parts[0]!.header.dataStart, others(parts));
    expect(identity).toMatch(/^[0-9a-f]{64}$/);
    expect(await ggufModelIdentity(first, parts[0]!.header.dataStart, others(parts))).toBe(identity);
    expect(await ggufModelIdentity(first, parts[0]!.header.dataStart)).not.toBe(identity);
    const swapped = [...others(parts)].reverse();
    expect(await ggufModelIdentity(first, parts[0]!.header.dataStart, swapped)).not.toBe(identity);
  });
});
