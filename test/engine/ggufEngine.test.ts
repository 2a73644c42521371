import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { encodeGguf } from "../../src/model/gguf/ggufWriter.ts";
import { parseGguf } from "../../src/model/gguf/ggufReader.ts";
import { ggufString } from "../../src/model/gguf/ggufMetadata.ts";
import { ggufModelIdentity, modelIdentity } from "../../src/kv/modelIdentity.ts";
import { TINY_MODEL_DEFAULTS, tinyModelFiles } from "../../src/model/tinyModel.ts";
import { writeModelFolder } from "../../src/model/writeModelFolder.ts";
import { tempFolder } from "../helpers/cli.ts";
import { RUNNER_CPU } from "../helpers/engineKit.ts";
import { ggufFromModelFolder } from "../helpers/ggufTinyModel.ts";
import { tokenizerFolderAsGguf } from "../helpers/ggufTokenizerMetadata.ts";

/** The tiny model folder as a GGUF file whose tokenizer metadata is the folder's tokenizer (byte-level BPE). */
function tinyGguf(folder: string, path: string, edit: (metadata: Map<string, import("../../src/model/gguf/ggufMetadata.ts").GgufValue>) => void = () => {}): string {
  const bytes = ggufFromModelFolder(folder, "f32");
  const header = parseGguf(bytes);
  const metadata = new Map([...header.metadata].filter(([key]) => !key.startsWith("tokenizer.")));
  for (const [key, value] of tokenizerFolderAsGguf(folder, { model: "gpt2", pre: "gpt-2" })) if (key.startsWith("tokenizer.")) metadata.set(key, value);
  edit(metadata);
  const tensors = header.tensors.map((tensor) => ({ name: tensor.name, type: tensor.type, dims: tensor.dims, data: () => bytes.subarray(tensor.fileOffset, tensor.fileOffset + tensor.bytes) }));
  writeFileSync(path, encodeGguf(metadata, tensors));
  return path;
}

let folder: { path: string; cleanup(): void };
let modelDir: string;
let ggufFile: string;
let fromFolder: GenerationEngine;
let fromGguf: GenerationEngine;

beforeAll(async () => {
  folder = tempFolder("ctxr-gguf-engine-");
  modelDir = join(folder.path, "tiny");
  writeModelFolder(modelDir, tinyModelFiles({ ...TINY_MODEL_DEFAULTS }));
  ggufFile = tinyGguf(modelDir, join(folder.path, "tiny-f32.gguf"));
  fromFolder = await GenerationEngine.open({ model: modelDir, runner: RUNNER_CPU, kvBlocks: 64, threads: 2 });
  fromGguf = await GenerationEngine.open({ model: ggufFile, runner: RUNNER_CPU, kvBlocks: 64, threads: 2 });
}, 60_000);

afterAll(async () => {
  await fromFolder?.close();
  await fromGguf?.close();
  folder.cleanup();
});

describe("serving a GGUF file", () => {
  test("the model id is the file's name without .gguf; the tokenizer and prompts are the folder's", () => {
    expect(fromGguf.modelId).toBe("tiny-f32");
    expect(fromGguf.modelDir).toBe(ggufFile);
    for (const text of ["Hello, world!", "héllo\n日本語 <s>x</s>"]) expect(fromGguf.completionPromptIds(text)).toEqual(fromFolder.completionPromptIds(text));
    const messages = [{ role: "user", content: "What is ctxr?" }];
    expect(fromGguf.chatPromptIds(messages)).toEqual(fromFolder.chatPromptIds(messages));
    expect(fromGguf.tokenizer.eosTokenIds).toEqual(fromFolder.tokenizer.eosTokenIds);
    expect(fromGguf.info.vocab).toBe(fromFolder.info.vocab);
    expect(fromGguf.maxModelLen).toBe(fromFolder.maxModelLen);
  });

  test("greedy generation gives the folder's tokens", async () => {
    const promptIds = fromFolder.completionPromptIds("The quick brown fox");
    const request = { promptIds, maxTokens: 12, sampling: { temperature: 0, topP: 1, topK: 0 }, ignoreEos: true };
    const expected = (await fromFolder.generate(request).result()).tokens.map((token) => token.id);
    const actual = (await fromGguf.generate(request).result()).tokens.map((token) => token.id);
    expect(actual).toEqual(expected);
    expect(actual.length).toBe(12);
  });

  test("the identity covers the GGUF header and size, and differs from the folder's", async () => {
    const header = parseGguf(await Bun.file(ggufFile).bytes());
    const identity = await ggufModelIdentity(ggufFile, header.dataStart);
    expect(identity).toMatch(/^[0-9a-f]{64}$/);
    expect(identity).not.toBe(await modelIdentity(modelDir));
    const other = tinyGguf(modelDir, join(folder.path, "other.gguf"), (metadata) => metadata.set("general.name", ggufString("other")));
    expect(await ggufModelIdentity(other, parseGguf(await Bun.file(other).bytes()).dataStart)).not.toBe(identity);
  });

  test("a folder holding one .gguf file serves it; --served-model-name wins", async () => {
    const dir = join(folder.path, "gguf-folder");
    mkdirSync(dir);
    tinyGguf(modelDir, join(dir, "model-q.gguf"));
    const engine = await GenerationEngine.open({ model: dir, runner: RUNNER_CPU, kvBlocks: 32, threads: 1 });
    try {
      expect(engine.modelId).toBe("model-q");
      expect(engine.modelDir).toBe(join(dir, "model-q.gguf"));
    } finally {
      await engine.close();
    }
    const named = await GenerationEngine.open({ model: dir, runner: RUNNER_CPU, kvBlocks: 32, threads: 1, servedModelName: "mine" });
    expect(named.modelId).toBe("mine");
    await named.close();
  }, 30_000);

  test("damaged, unsupported and ambiguous models are refused before the runner starts, naming the key, tensor or files", async () => {
    const runner = join(folder.path, "no-such-runner");
    const truncated = join(folder.path, "truncated.gguf");
    writeFileSync(truncated, (await Bun.file(ggufFile).bytes()).subarray(0, 200));
    await expect(GenerationEngine.open({ model: truncated, runner })).rejects.toThrow(/truncated\.gguf/);
    const gemma = tinyGguf(modelDir, join(folder.path, "gemma.gguf"), (metadata) => metadata.set("general.architecture", ggufString("gemma2")));
    await expect(GenerationEngine.open({ model: gemma, runner })).rejects.toThrow(/general\.architecture is "gemma2"/);
    const badPre = tinyGguf(modelDir, join(folder.path, "pre.gguf"), (metadata) => metadata.set("tokenizer.ggml.pre", ggufString("tekken")));
    await expect(GenerationEngine.open({ model: badPre, runner })).rejects.toThrow(/tokenizer\.ggml\.pre is "tekken"/);
    const two = join(folder.path, "two");
    mkdirSync(two);
    tinyGguf(modelDir, join(two, "a.gguf"));
    tinyGguf(modelDir, join(two, "b.gguf"));
    await expect(GenerationEngine.open({ model: two, runner })).rejects.toThrow(/holds 2 GGUF files \(a\.gguf, b\.gguf\)/);
    const mixed = join(folder.path, "mixed");
    writeModelFolder(mixed, tinyModelFiles({ ...TINY_MODEL_DEFAULTS }));
    tinyGguf(modelDir, join(mixed, "m.gguf"));
    await expect(GenerationEngine.open({ model: mixed, runner })).rejects.toThrow(/holds both a GGUF file \(m\.gguf\) and safetensors files \(model\.safetensors\)/);
  });
});
