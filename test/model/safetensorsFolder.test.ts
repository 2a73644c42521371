import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeSafetensors } from "../../src/model/safetensors.ts";
import { openSafetensorsFolder } from "../../src/model/safetensorsFolder.ts";

const scratch = mkdtempSync(join(tmpdir(), "ctxr-st-folder-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const f32 = (values: number[]) => new Uint8Array(new Float32Array(values).buffer);

describe("safetensors folder", () => {
  test("shards listed by the index are opened lazily and read by name", () => {
    const dir = join(scratch, "sharded");
    mkdirSync(dir);
    writeFileSync(join(dir, "model-00001-of-00002.safetensors"), encodeSafetensors([{ name: "a", dtype: "F32", shape: [2], data: f32([1, 2]) }]));
    writeFileSync(join(dir, "model-00002-of-00002.safetensors"), encodeSafetensors([{ name: "b", dtype: "F16", shape: [1], data: new Uint8Array([0x00, 0x3c]) }]));
    writeFileSync(join(dir, "stray.safetensors"), encodeSafetensors([{ name: "c", dtype: "F32", shape: [1], data: f32([9]) }]));
    writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ weight_map: { a: "model-00001-of-00002.safetensors", b: "model-00002-of-00002.safetensors" } }));
    const folder = openSafetensorsFolder(dir);
    expect([...folder.tensors.keys()].sort()).toEqual(["a", "b"]);
    expect([...folder.readFloat32("a")]).toEqual([1, 2]);
    expect([...folder.readFloat32("b")]).toEqual([1]);
    expect(() => folder.readFloat32("c")).toThrow("no tensor c");
  });

  test("without an index every *.safetensors file is read; a tensor in two files is an error", () => {
    const dir = join(scratch, "loose");
    mkdirSync(dir);
    writeFileSync(join(dir, "one.safetensors"), encodeSafetensors([{ name: "a", dtype: "F32", shape: [1], data: f32([1]) }]));
    writeFileSync(join(dir, "two.safetensors"), encodeSafetensors([{ name: "a", dtype: "F32", shape: [1], data: f32([2]) }]));
    expect(() => openSafetensorsFolder(dir)).toThrow(/tensor a is in both .*one.safetensors and .*two.safetensors/);
    const empty = join(scratch, "empty");
    mkdirSync(empty);
    expect(() => openSafetensorsFolder(empty)).toThrow("no *.safetensors files");
  });

  test("a truncated shard is named", () => {
    const dir = join(scratch, "truncated");
    mkdirSync(dir);
    const bytes = encodeSafetensors([{ name: "a", dtype: "F32", shape: [4], data: f32([1, 2, 3, 4]) }]);
    writeFileSync(join(dir, "model.safetensors"), bytes.subarray(0, bytes.length - 4));
    expect(() => openSafetensorsFolder(dir)).toThrow(/model.safetensors/);
  });
});
