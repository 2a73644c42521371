/**
 * A model's identity for chunk caches: a stable hex digest of what determines the
 * K/V a model computes, its weights and geometry, without reading the weights.
 * sha256 over, each value length-prefixed so that no two folders frame the same
 * bytes: a format tag, config.json's bytes, then for each *.safetensors file of
 * the folder (sorted by name, UTF-16 code unit order) its name, its size and its header (the
 * 8-byte length and the JSON that names every tensor's dtype, shape and offsets).
 * The multi-GB payloads are not read: a changed tensor value that leaves the
 * header, size and config alike goes unnoticed (retrained weights in place are
 * not a case this guards against; a different checkpoint has a different header
 * or config in practice, and its own file names and sizes).
 *
 * A GGUF file's identity (ggufModelIdentity) is the same kind of digest under its own tag:
 * the file's size and its header, everything before the tensor data (the metadata with
 * hyperparameters and tokenizer, and every tensor's name, type, shape and offset).
 */
import { createHash } from "node:crypto";
import { open, readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { MAX_HEADER_BYTES } from "../model/safetensors.ts";

/** Bumped when what the digest covers changes (old caches then stop matching). */
const IDENTITY_TAG = "ctxr-model-identity-v1";
const GGUF_IDENTITY_TAG = "ctxr-gguf-model-identity-v1";

export class ModelIdentityError extends Error {
  constructor(message: string) {
    super(`model identity: ${message}`);
    this.name = "ModelIdentityError";
  }
}

function u64(value: number): Uint8Array {
  const bytes = new Uint8Array(8);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(value), true);
  return bytes;
}

/** The first 8 + N bytes of a safetensors file (its length field and JSON header) and the file's size. */
async function safetensorsHeaderBytes(path: string): Promise<{ header: Uint8Array; size: number }> {
  const handle = await open(path, "r");
  try {
    const size = (await handle.stat()).size;
    if (size < 8) throw new ModelIdentityError(`${path}: ${size} bytes is shorter than the 8-byte header length`);
    const lengthField = new Uint8Array(8);
    await readExactly(handle, lengthField, 0, path);
    const declared = new DataView(lengthField.buffer).getBigUint64(0, true);
    if (declared > BigInt(MAX_HEADER_BYTES)) throw new ModelIdentityError(`${path}: header length ${declared} is over the limit of ${MAX_HEADER_BYTES} bytes`);
    const headerBytes = Number(declared);
    if (8 + headerBytes > size) throw new ModelIdentityError(`${path}: header length ${headerBytes} runs past the end of the file (${size} bytes)`);
    const header = new Uint8Array(8 + headerBytes);
    header.set(lengthField);
    await readExactly(handle, header.subarray(8), 8, path);
    return { header, size };
  } finally {
    await handle.close();
  }
}

async function readExactly(handle: Awaited<ReturnType<typeof open>>, into: Uint8Array, position: number, path: string): Promise<void> {
  let done = 0;
  while (done < into.length) {
    const { bytesRead } = await handle.read(into, done, into.length - done, position + done);
    if (bytesRead === 0) throw new ModelIdentityError(`${path}: file ended after ${position + done} bytes`);
    done += bytesRead;
  }
}

/**
 * The identity of the model in `modelDir` (64 lowercase hex digits). Throws a
 * ModelIdentityError when config.json is missing or a safetensors header cannot be
 * read.
 */
export async function modelIdentity(modelDir: string): Promise<string> {
  const hash = createHash("sha256");
  const encoder = new TextEncoder();
  const field = (bytes: Uint8Array): void => {
    hash.update(u64(bytes.length));
    hash.update(bytes);
  };
  field(encoder.encode(IDENTITY_TAG));

  let config: Uint8Array;
  try {
    config = await readFile(join(modelDir, "config.json"));
  } catch (error) {
    throw new ModelIdentityError(`cannot read ${join(modelDir, "config.json")}: ${(error as Error).message}`);
  }
  field(config);

  const entries = await readdir(modelDir, { withFileTypes: true });
  const names = entries
    .filter((entry) => entry.name.endsWith(".safetensors") && (entry.isFile() || entry.isSymbolicLink()))
    .map((entry) => entry.name)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  hash.update(u64(names.length));
  for (const name of names) {
    const { header, size } = await safetensorsHeaderBytes(join(modelDir, name));
    field(encoder.encode(name));
    hash.update(u64(size));
    field(header);
  }
  return hash.digest("hex");
}

/**
 * The identity of a GGUF model file (64 lowercase hex digits): its size and its first
 * `dataStart` bytes (the header up to the tensor data, as the GGUF reader reports it). A model
 * split in parts adds, after the first part's, each other part's size and header (a one-file
 * model's digest is unchanged by that).
 */
export async function ggufModelIdentity(path: string, dataStart: number, otherParts: readonly { path: string; dataStart: number }[] = []): Promise<string> {
  const hash = createHash("sha256");
  const tag = new TextEncoder().encode(GGUF_IDENTITY_TAG);
  hash.update(u64(tag.length));
  hash.update(tag);
  await hashGgufHeader(hash, path, dataStart);
  if (otherParts.length > 0) hash.update(u64(otherParts.length));
  for (const part of otherParts) await hashGgufHeader(hash, part.path, part.dataStart);
  return hash.digest("hex");
}

async function hashGgufHeader(hash: ReturnType<typeof createHash>, path: string, dataStart: number): Promise<void> {
  const handle = await open(path, "r");
  try {
    const size = (await handle.stat()).size;
    if (!Number.isSafeInteger(dataStart) || dataStart < 0 || dataStart > size) throw new ModelIdentityError(`${path}: header end ${dataStart} is outside the file (${size} bytes)`);
    const header = new Uint8Array(dataStart);
    await readExactly(handle, header, 0, path);
    hash.update(u64(size));
    hash.update(u64(header.length));
    hash.update(header);
  } finally {
    await handle.close();
  }
}
