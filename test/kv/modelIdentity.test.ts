import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { encodeSafetensors } from "../../src/model/safetensors.ts";
import { ModelIdentityError, modelIdentity } from "../../src/kv/modelIdentity.ts";

const folders: string[] = [];
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

function tempFolder(): string {
  const folder = mkdtempSync(join(tmpdir(), "ctxr-model-identity-"));
  folders.push(folder);
  return folder;
}

const CONFIG = JSON.stringify({ hidden_size: 8, num_hidden_layers: 2, num_key_value_heads: 1 });

function shard(values: number[], name = "w"): Uint8Array {
  return encodeSafetensors([{ name, dtype: "F32", shape: [values.length], data: new Uint8Array(new Float32Array(values).buffer) }]);
}

/** A model folder with config.json and two shards. */
function modelFolder(options: { config?: string; first?: Uint8Array; second?: Uint8Array } = {}): string {
  const folder = tempFolder();
  writeFileSync(join(folder, "config.json"), options.config ?? CONFIG);
  writeFileSync(join(folder, "model-00001-of-00002.safetensors"), options.first ?? shard([1, 2, 3]));
  writeFileSync(join(folder, "model-00002-of-00002.safetensors"), options.second ?? shard([4, 5]));
  writeFileSync(join(folder, "tokenizer.json"), "{}");
  return folder;
}

describe("modelIdentity", () => {
  test("a 64-digit hex digest, the same for the same folder and for an equal copy", async () => {
    const folder = modelFolder();
    const id = await modelIdentity(folder);
    expect(id).toMatch(/^[0-9a-f]{64}$/);
    expect(await modelIdentity(folder)).toBe(id);
    expect(await modelIdentity(modelFolder())).toBe(id);
  });

  test("files other than config.json and *.safetensors do not count", async () => {
    const folder = modelFolder();
    const id = await modelIdentity(folder);
    writeFileSync(join(folder, "tokenizer.json"), '{"changed": true}');
    writeFileSync(join(folder, "README.md"), "hello");
    expect(await modelIdentity(folder)).toBe(id);
  });

  test("a changed config.json gives another identity", async () => {
    const id = await modelIdentity(modelFolder());
    expect(await modelIdentity(modelFolder({ config: CONFIG.replace('"num_hidden_layers":2', '"num_hidden_layers":3') }))).not.toBe(id);
    expect(await modelIdentity(modelFolder({ config: CONFIG + " " }))).not.toBe(id);
  });

  test("a changed safetensors header (shape, tensor name) gives another identity", async () => {
    const id = await modelIdentity(modelFolder());
    expect(await modelIdentity(modelFolder({ second: shard([4, 5, 6]) }))).not.toBe(id);
    expect(await modelIdentity(modelFolder({ second: shard([4, 5], "v") }))).not.toBe(id);
  });

  test("the payload is not read: equal headers and sizes give the same identity", async () => {
    const id = await modelIdentity(modelFolder());
    expect(await modelIdentity(modelFolder({ second: shard([7, 8]) }))).toBe(id);
  });

  test("a renamed, added or removed shard gives another identity", async () => {
    const id = await modelIdentity(modelFolder());
    const renamed = modelFolder();
    rmSync(join(renamed, "model-00002-of-00002.safetensors"));
    expect(await modelIdentity(renamed)).not.toBe(id);
    writeFileSync(join(renamed, "model-00002-of-00002x.safetensors"), shard([4, 5]));
    expect(await modelIdentity(renamed)).not.toBe(id);
    const added = modelFolder();
    writeFileSync(join(added, "extra.safetensors"), shard([1]));
    expect(await modelIdentity(added)).not.toBe(id);
  });

  test("missing config.json and broken headers are errors", async () => {
    const noConfig = modelFolder();
    rmSync(join(noConfig, "config.json"));
    await expect(modelIdentity(noConfig)).rejects.toThrow(ModelIdentityError);
    const short = modelFolder({ first: new Uint8Array(5) });
    await expect(modelIdentity(short)).rejects.toThrow(/shorter than the 8-byte header length/);
    const overrun = shard([1, 2, 3]).slice(0, 20);
    await expect(modelIdentity(modelFolder({ first: overrun }))).rejects.toThrow(/runs past the end of the file/);
  });
});
