/** A tiny but real, servable GGUF file: the tiny model with its byte-level BPE tokenizer in the GGUF metadata. */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseGguf } from "../../src/model/gguf/ggufReader.ts";
import { encodeGguf } from "../../src/model/gguf/ggufWriter.ts";
import { TINY_MODEL_DEFAULTS, tinyModelFiles } from "../../src/model/tinyModel.ts";
import { writeModelFolder } from "../../src/model/writeModelFolder.ts";
import { ggufFromModelFolder } from "./ggufTinyModel.ts";
import { tokenizerFolderAsGguf } from "./ggufTokenizerMetadata.ts";

export function servableTinyGguf(seed = TINY_MODEL_DEFAULTS.seed): Uint8Array {
  const folder = mkdtempSync(join(tmpdir(), "ctxr-servable-gguf-"));
  try {
    writeModelFolder(folder, tinyModelFiles({ ...TINY_MODEL_DEFAULTS, seed }));
    const bytes = ggufFromModelFolder(folder, "f32");
    const header = parseGguf(bytes);
    const metadata = new Map([...header.metadata].filter(([key]) => !key.startsWith("tokenizer.")));
    for (const [key, value] of tokenizerFolderAsGguf(folder, { model: "gpt2", pre: "gpt-2" })) if (key.startsWith("tokenizer.")) metadata.set(key, value);
    const tensors = header.tensors.map((tensor) => ({ name: tensor.name, type: tensor.type, dims: tensor.dims, data: () => bytes.subarray(tensor.fileOffset, tensor.fileOffset + tensor.bytes) }));
    return encodeGguf(metadata, tensors);
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

/** The tiny model's Hugging Face folder files (config.json, model.safetensors, tokenizer files) by name. */
export function tinyModelFolderFiles(): Record<string, Uint8Array> {
  const folder = mkdtempSync(join(tmpdir(), "ctxr-tiny-folder-"));
  try {
    const written = writeModelFolder(folder, tinyModelFiles({ ...TINY_MODEL_DEFAULTS }));
    return Object.fromEntries(written.map((file) => [file.name, new Uint8Array(readFileSync(join(folder, file.name)))]));
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}
