import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DiskKvError, type DiskKvProblem, DiskKvTier, type DiskKvTierOptions, kvFileName } from "../../src/kv/diskKvTier.ts";
import { KvCacheFileError, encodeKvCacheFile, kvCacheHeaderEnd } from "../../src/kv/kvCacheFile.ts";
import { expectSameKv, randomKv } from "./kvFixtures.ts";

const MODEL = "0123456789abcdef".repeat(4);
const LAYERS = 3;
const WIDTH = 8;

const folders: string[] = [];
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

function tempFolder(): string {
  const folder = mkdtempSync(join(tmpdir(), "ctxr-disk-kv-"));
  folders.push(folder);
  return folder;
}

function tier(dir: string, options: Partial<DiskKvTierOptions> = {}): DiskKvTier {
  return new DiskKvTier({ dir, capacityBytes: 1 << 24, modelIdentity: MODEL, layers: LAYERS, kvWidth: WIDTH, ...options });
}

async function readProblem(disk: DiskKvTier, key: string): Promise<DiskKvProblem> {
  let caught: unknown;
  try {
    await disk.read(key);
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(DiskKvError);
  expect((caught as DiskKvError).key).toBe(key);
  return (caught as DiskKvError).problem;
}

/** Only the .ctxkv files and temporaries (no foreign files) in a folder. */
function cacheFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((name) => name.endsWith(".ctxkv") || name.endsWith(".tmp"))
    .sort();
}

describe("kvFileName", () => {
  test("safe characters only, distinct keys distinct names, long keys shortened", () => {
    const keys = ["chunk:abc/v1", "chunk_abc_v1", "Chunk:abc/v1", "", "ü∂ß", "../../etc/passwd", "x".repeat(500), "x".repeat(501)];
    const names = keys.map(kvFileName);
    for (const name of names) {
      expect(name).toMatch(/^[A-Za-z0-9_-]+\.[0-9a-f]{32}\.ctxkv$/);
      expect(name.length).toBeLessThanOrEqual(80 + 1 + 32 + 6);
    }
    expect(new Set(names.map((n) => n.toLowerCase())).size).toBe(keys.length);
    expect(kvFileName("chunk:abc/v1")).toBe(kvFileName("chunk:abc/v1"));
    expect(kvFileName("chunk:abc/v1").startsWith("chunk_abc_v1.")).toBe(true);
  });
});

describe("DiskKvTier writes and reads", () => {
  test("creates its folder; lossless round trips of several shapes with their meta; no temporary file left", async () => {
    const dir = join(tempFolder(), "nested", "kv");
    const disk = tier(dir);
    expect(existsSync(dir)).toBe(true);
    const shapes = [1, 15, 16, 17, 37];
    for (const count of shapes) {
      expect(await disk.write(`v${count}`, randomKv(LAYERS, WIDTH, count, count), { count, hash: `h${count}`, list: [1, 2] })).toBe(true);
    }
    expect(disk.keys()).toEqual(shapes.map((c) => `v${c}`));
    for (const count of shapes) {
      const read = (await disk.read(`v${count}`))!;
      expectSameKv(read.data, randomKv(LAYERS, WIDTH, count, count));
      expect(read.meta).toEqual({ count, hash: `h${count}`, list: [1, 2] });
      expect(read.count).toBe(count);
      expect(read.bytes).toBe(statSync(disk.pathOf(`v${count}`)).size);
      expect(disk.entry(`v${count}`)!.meta).toEqual(read.meta);
    }
    expect(cacheFiles(dir)).toEqual(shapes.map((c) => kvFileName(`v${c}`)).sort());
  });

  test("the file on disk is the chunk-cache encoding, page size from the options", async () => {
    const disk = tier(tempFolder(), { pageSize: 4 });
    const data = randomKv(LAYERS, WIDTH, 10);
    await disk.write("k", data, { a: 1 });
    const expectedBytes = encodeKvCacheFile(data, { modelIdentity: MODEL, layers: LAYERS, kvWidth: WIDTH, meta: { a: 1 }, key: "k", pageSize: 4 });
    expect(readFileSync(disk.pathOf("k")).equals(expectedBytes)).toBe(true);
  });

  test("an unknown key reads as null", async () => {
    const disk = tier(tempFolder());
    expect(await disk.read("nothing")).toBeNull();
    expect(disk.has("nothing")).toBe(false);
  });

  test("replacing a key replaces its file and its bytes", async () => {
    const disk = tier(tempFolder());
    await disk.write("k", randomKv(LAYERS, WIDTH, 5, 1), { version: 1 });
    const small = disk.bytesUsed;
    await disk.write("k", randomKv(LAYERS, WIDTH, 40, 2), { version: 2 });
    expect(disk.bytesUsed).toBeGreaterThan(small);
    expect(disk.bytesUsed).toBe(statSync(disk.pathOf("k")).size);
    const read = (await disk.read("k"))!;
    expectSameKv(read.data, randomKv(LAYERS, WIDTH, 40, 2));
    expect(read.meta).toEqual({ version: 2 });
    expect(disk.size).toBe(1);
  });

  test("delete removes the file and the key", async () => {
    const disk = tier(tempFolder());
    await disk.write("k", randomKv(LAYERS, WIDTH, 3), {});
    expect(await disk.delete("k")).toBe(true);
    expect(existsSync(disk.pathOf("k"))).toBe(false);
    expect(disk.has("k")).toBe(false);
    expect(disk.bytesUsed).toBe(0);
    expect(await disk.delete("k")).toBe(false);
    expect(await disk.read("k")).toBeNull();
  });

  test("operations on a key run in the order called", async () => {
    const disk = tier(tempFolder());
    const writes = [disk.write("k", randomKv(LAYERS, WIDTH, 3, 1), { n: 1 }), disk.write("k", randomKv(LAYERS, WIDTH, 4, 2), { n: 2 })];
    const deleted = disk.delete("k");
    const afterDelete = disk.read("k");
    const rewritten = disk.write("k", randomKv(LAYERS, WIDTH, 5, 3), { n: 3 });
    const last = disk.read("k");
    expect(await Promise.all(writes)).toEqual([true, true]);
    expect(await deleted).toBe(true);
    expect(await afterDelete).toBeNull();
    expect(await rewritten).toBe(true);
    expect((await last)!.meta).toEqual({ n: 3 });
    expect(disk.bytesUsed).toBe(statSync(disk.pathOf("k")).size);
  });

  test("KvData of another geometry and non-object meta are refused without a file", async () => {
    const dir = tempFolder();
    const disk = tier(dir);
    await expect(disk.write("k", randomKv(LAYERS + 1, WIDTH, 3), {})).rejects.toBeInstanceOf(KvCacheFileError);
    await expect(disk.write("k", randomKv(LAYERS, WIDTH, 3), [1] as unknown as object)).rejects.toBeInstanceOf(KvCacheFileError);
    expect(disk.has("k")).toBe(false);
    expect(cacheFiles(dir)).toEqual([]);
  });
});

describe("DiskKvTier capacity", () => {
  test("bytesUsed is the files' sizes; going over is allowed and overflowBytes says by how much", async () => {
    const probe = tier(tempFolder());
    await probe.write("p", randomKv(LAYERS, WIDTH, 10), {});
    const fileBytes = probe.bytesUsed;
    const disk = tier(tempFolder(), { capacityBytes: 2 * fileBytes + 5 });
    await disk.write("a", randomKv(LAYERS, WIDTH, 10, 1), {});
    await disk.write("b", randomKv(LAYERS, WIDTH, 10, 2), {});
    expect(disk.bytesUsed).toBe(2 * fileBytes);
    expect(disk.overflowBytes()).toBe(0);
    expect(await disk.write("c", randomKv(LAYERS, WIDTH, 10, 3), {})).toBe(true);
    expect(disk.overflowBytes()).toBe(fileBytes - 5);
    await disk.delete("a");
    expect(disk.overflowBytes()).toBe(0);
    expect(disk.keys()).toEqual(["b", "c"]);
    expect(disk.capacityBytes).toBe(2 * fileBytes + 5);
  });

  test("a file larger than the capacity is refused; an older file of the key stays", async () => {
    const probe = tier(tempFolder());
    await probe.write("p", randomKv(LAYERS, WIDTH, 10), { n: 0 });
    const disk = tier(tempFolder(), { capacityBytes: probe.bytesUsed });
    expect(await disk.write("k", randomKv(LAYERS, WIDTH, 10, 1), { n: 1 })).toBe(true);
    expect(await disk.write("k", randomKv(LAYERS, WIDTH, 11), { n: 2 })).toBe(false);
    expect(await disk.write("other", randomKv(LAYERS, WIDTH, 11), {})).toBe(false);
    expect(disk.keys()).toEqual(["k"]);
    expectSameKv((await disk.read("k"))!.data, randomKv(LAYERS, WIDTH, 10, 1));
    expect(cacheFiles(disk.dir)).toEqual([kvFileName("k")]);
  });
});

describe("DiskKvTier discards damaged files on read", () => {
  async function damagedRead(damage: (path: string, file: Uint8Array) => void, options: Partial<DiskKvTierOptions> = {}): Promise<DiskKvProblem> {
    const disk = tier(tempFolder(), options);
    await disk.write("k", randomKv(LAYERS, WIDTH, 21), { m: 1 });
    await disk.write("other", randomKv(LAYERS, WIDTH, 2), {});
    const otherBytes = statSync(disk.pathOf("other")).size;
    const path = disk.pathOf("k");
    damage(path, new Uint8Array(readFileSync(path)));
    const problem = await readProblem(disk, "k");
    expect(existsSync(path)).toBe(false);
    expect(disk.has("k")).toBe(false);
    expect(disk.keys()).toEqual(["other"]);
    expect(disk.bytesUsed).toBe(otherBytes);
    expect(await disk.read("k")).toBeNull();
    return problem;
  }

  const flip = (at: (file: Uint8Array) => number, bit = 0) => (path: string, file: Uint8Array) => {
    file[at(file)]! ^= 1 << bit;
    writeFileSync(path, file);
  };

  test("a flipped bit in the magic, header, header checksum, positions, K/V payload or trailer", async () => {
    expect(await damagedRead(flip(() => 3))).toBe("magic");
    expect(await damagedRead(flip(() => 20, 1))).toBe("header");
    expect(await damagedRead(flip((f) => kvCacheHeaderEnd(f) - 1, 7))).toBe("header");
    expect(await damagedRead(flip((f) => kvCacheHeaderEnd(f) + 2, 3))).toBe("checksum");
    expect(await damagedRead(flip((f) => f.length - 100, 5))).toBe("checksum");
    expect(await damagedRead(flip((f) => f.length - 1, 7))).toBe("checksum");
  });

  test("truncated, appended to, emptied", async () => {
    expect(await damagedRead((path, file) => writeFileSync(path, file.subarray(0, file.length - 1)))).toBe("truncated");
    expect(await damagedRead((path, file) => writeFileSync(path, file.subarray(0, 30)))).toBe("truncated");
    expect(await damagedRead((path, file) => writeFileSync(path, Buffer.concat([file, new Uint8Array(3)])))).toBe("trailing");
    expect(await damagedRead((path) => writeFileSync(path, new Uint8Array(0)))).toBe("truncated");
  });

  test("written for another model or geometry, or holding another key", async () => {
    const foreign = (options: { modelIdentity?: string; layers?: number; kvWidth?: number; key?: string }) => (path: string) => {
      const layers = options.layers ?? LAYERS;
      const kvWidth = options.kvWidth ?? WIDTH;
      writeFileSync(path, encodeKvCacheFile(randomKv(layers, kvWidth, 21), { modelIdentity: MODEL, layers, kvWidth, key: "k", meta: {}, ...options }));
    };
    expect(await damagedRead(foreign({ modelIdentity: "f".repeat(64) }))).toBe("model");
    expect(await damagedRead(foreign({ layers: LAYERS + 1 }))).toBe("geometry");
    expect(await damagedRead(foreign({ kvWidth: WIDTH * 2 }))).toBe("geometry");
    expect(await damagedRead(foreign({ key: "someone else" }))).toBe("key");
  });

  test("a file gone from the folder", async () => {
    expect(await damagedRead((path) => rmSync(path))).toBe("missing");
  });

  test("the error message names the file and the problem", async () => {
    const disk = tier(tempFolder());
    await disk.write("k", randomKv(LAYERS, WIDTH, 3), {});
    const file = new Uint8Array(readFileSync(disk.pathOf("k")));
    file[file.length - 9]! ^= 1;
    writeFileSync(disk.pathOf("k"), file);
    await expect(disk.read("k")).rejects.toThrow(`${kvFileName("k")}: chunk cache file: checksum mismatch`);
  });
});

describe("DiskKvTier.scan", () => {
  test("after a restart: keeps the valid files with their keys and meta, discards damaged, foreign and temporary files", async () => {
    const dir = tempFolder();
    const before = tier(dir);
    const good = ["good/1", "good/2", "good/3"];
    for (const [i, key] of good.entries()) await before.write(key, randomKv(LAYERS, WIDTH, 5 + i, i), { key, i });
    for (const key of ["flipped", "truncated", "appended", "header"]) await before.write(key, randomKv(LAYERS, WIDTH, 7), { key });
    const flipped = new Uint8Array(readFileSync(before.pathOf("flipped")));
    flipped[flipped.length - 50]! ^= 16;
    writeFileSync(before.pathOf("flipped"), flipped);
    const truncated = readFileSync(before.pathOf("truncated"));
    writeFileSync(before.pathOf("truncated"), truncated.subarray(0, truncated.length - 8));
    writeFileSync(before.pathOf("appended"), Buffer.concat([readFileSync(before.pathOf("appended")), Buffer.from("x")]));
    const header = new Uint8Array(readFileSync(before.pathOf("header")));
    header[15]! ^= 2;
    writeFileSync(before.pathOf("header"), header);
    // Another model's and another geometry's files under names of this folder.
    const otherModel = new DiskKvTier({ dir, capacityBytes: 1 << 24, modelIdentity: "e".repeat(64), layers: LAYERS, kvWidth: WIDTH });
    await otherModel.write("other-model", randomKv(LAYERS, WIDTH, 4), {});
    const otherGeometry = new DiskKvTier({ dir, capacityBytes: 1 << 24, modelIdentity: MODEL, layers: 2, kvWidth: WIDTH });
    await otherGeometry.write("other-geometry", randomKv(2, WIDTH, 4), {});
    // A valid file under another key's name.
    await before.write("renamed", randomKv(LAYERS, WIDTH, 4), {});
    renameSync(before.pathOf("renamed"), join(dir, kvFileName("elsewhere")));
    // An interrupted write, a file that is not ours, a stray file with the extension.
    writeFileSync(join(dir, `.${kvFileName("good/1")}.4242.7.tmp`), "partial");
    writeFileSync(join(dir, "README.txt"), "not a cache file");
    writeFileSync(join(dir, "garbage.ctxkv"), "garbage");

    const lines: string[] = [];
    const after = tier(dir, { log: (line) => lines.push(line) });
    expect(after.keys()).toEqual([]);
    const entries = await after.scan();
    expect(entries.map((e) => e.key).sort()).toEqual(good);
    for (const entry of entries) expect(entry.meta).toEqual({ key: entry.key, i: good.indexOf(entry.key) });
    expect(entries.map((e) => e.count).sort()).toEqual([5, 6, 7]);
    expect(after.keys().sort()).toEqual(good);
    expect(cacheFiles(dir)).toEqual(good.map(kvFileName).sort());
    expect(existsSync(join(dir, "README.txt"))).toBe(true);
    expect(after.bytesUsed).toBe(good.reduce((sum, key) => sum + statSync(after.pathOf(key)).size, 0));
    for (const [i, key] of good.entries()) expectSameKv((await after.read(key))!.data, randomKv(LAYERS, WIDTH, 5 + i, i));

    expect(lines.length).toBe(9);
    const about = (name: string) => lines.find((line) => line.includes(name)) ?? `(no line about ${name})`;
    expect(about(kvFileName("flipped"))).toContain("checksum mismatch");
    expect(about(kvFileName("truncated"))).toContain("truncated");
    expect(about(kvFileName("appended"))).toContain("after the end of the file");
    expect(about(kvFileName("header"))).toContain("header checksum mismatch");
    expect(about(kvFileName("other-model"))).toContain("another model");
    expect(about(kvFileName("other-geometry"))).toContain("written for 2 layers");
    expect(about(kvFileName("elsewhere"))).toContain('holds key "renamed"');
    expect(about("garbage.ctxkv")).toContain("bad magic");
    expect(about(".4242.7.tmp")).toContain("temporary file");
    expect(lines.every((line) => line.startsWith("ctxr: chunk cache"))).toBe(true);
  });

  test("an empty folder scans to nothing; a scan replaces what the tier knew", async () => {
    const dir = tempFolder();
    const disk = tier(dir);
    expect(await disk.scan()).toEqual([]);
    await disk.write("a", randomKv(LAYERS, WIDTH, 2), {});
    await disk.write("b", randomKv(LAYERS, WIDTH, 2), {});
    rmSync(disk.pathOf("a"));
    expect((await disk.scan()).map((e) => e.key)).toEqual(["b"]);
    expect(disk.keys()).toEqual(["b"]);
    expect(disk.bytesUsed).toBe(statSync(disk.pathOf("b")).size);
  });

  test("verifyPayload false reads headers only: payload damage is caught by the read instead", async () => {
    const dir = tempFolder();
    const before = tier(dir);
    await before.write("payload", randomKv(LAYERS, WIDTH, 9), { n: 1 });
    await before.write("header", randomKv(LAYERS, WIDTH, 9), { n: 2 });
    await before.write("short", randomKv(LAYERS, WIDTH, 9), { n: 3 });
    const payload = new Uint8Array(readFileSync(before.pathOf("payload")));
    payload[payload.length - 30]! ^= 1;
    writeFileSync(before.pathOf("payload"), payload);
    const header = new Uint8Array(readFileSync(before.pathOf("header")));
    header[14]! ^= 1;
    writeFileSync(before.pathOf("header"), header);
    writeFileSync(before.pathOf("short"), readFileSync(before.pathOf("short")).subarray(0, 100));

    const lines: string[] = [];
    const after = tier(dir, { log: (line) => lines.push(line) });
    const entries = await after.scan({ verifyPayload: false });
    expect(entries).toEqual([{ key: "payload", meta: { n: 1 }, count: 9, bytes: payload.length }]);
    expect(lines.length).toBe(2);
    expect(await readProblem(after, "payload")).toBe("checksum");
    expect(cacheFiles(dir)).toEqual([]);
  });

  test("a header larger than the first read is read whole", async () => {
    const dir = tempFolder();
    const meta = { big: "y".repeat(100_000) };
    await tier(dir).write("big", randomKv(LAYERS, WIDTH, 3), meta);
    const entries = await tier(dir).scan({ verifyPayload: false });
    expect(entries.map((e) => e.meta)).toEqual([meta]);
  });
});
