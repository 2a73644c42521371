/**
 * The tensors of a Hugging Face model folder (config.json plus one model.safetensors
 * or several shards, listed by model.safetensors.index.json or found as *.safetensors),
 * opened lazily: only each file's header is read (8 + N bytes, bounded reads); a
 * tensor's bytes are read when asked for.
 *
 *   const folder = openSafetensorsFolder(path);
 *   folder.tensors.get("model.embed_tokens.weight")   // { shape, dtype, ... }
 *   folder.readFloat32("model.embed_tokens.weight")    // its values as float32
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { MAX_HEADER_BYTES, SafetensorsError, type TensorEntry, parseSafetensorsHeader, tensorToFloat32 } from "./safetensors.ts";

export interface FolderTensor extends TensorEntry {
  file: string;
}

export interface SafetensorsFolder {
  tensors: Map<string, FolderTensor>;
  readBytes(name: string): Uint8Array;
  readFloat32(name: string): Float32Array;
}

function readAt(fd: number, offset: number, length: number): Uint8Array {
  const buffer = new Uint8Array(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, buffer, done, length - done, offset + done);
    if (n === 0) break;
    done += n;
  }
  return buffer.subarray(0, done);
}

function readHeader(path: string): TensorEntry[] {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const lengthBytes = readAt(fd, 0, 8);
    if (lengthBytes.length < 8) throw new SafetensorsError(`${path}: file of ${size} bytes is shorter than the 8-byte header length`);
    const declared = new DataView(lengthBytes.buffer).getBigUint64(0, true);
    const headerBytes = declared > BigInt(MAX_HEADER_BYTES) ? MAX_HEADER_BYTES : Number(declared);
    const head = readAt(fd, 0, Math.min(size, 8 + headerBytes));
    return parseSafetensorsHeader(head, size).entries;
  } catch (error) {
    if (error instanceof SafetensorsError && !error.message.includes(path)) throw new SafetensorsError(`${path}: ${error.message.replace(/^safetensors: /, "")}`);
    throw error;
  } finally {
    closeSync(fd);
  }
}

/** The shard files of a folder: the index's files, else every *.safetensors file. */
export function safetensorsFiles(folder: string): string[] {
  const index = join(folder, "model.safetensors.index.json");
  if (existsSync(index)) {
    let json: { weight_map?: Record<string, string> };
    try {
      json = JSON.parse(readFileSync(index, "utf8"));
    } catch (error) {
      throw new SafetensorsError(`${index}: not valid JSON (${(error as Error).message})`);
    }
    if (typeof json.weight_map !== "object" || json.weight_map === null) throw new SafetensorsError(`${index}: no weight_map object`);
    return [...new Set(Object.values(json.weight_map))].sort();
  }
  const files = readdirSync(folder).filter((name) => name.endsWith(".safetensors")).sort();
  if (files.length === 0) throw new SafetensorsError(`${folder}: no *.safetensors files`);
  return files;
}

export function openSafetensorsFolder(folder: string): SafetensorsFolder {
  const tensors = new Map<string, FolderTensor>();
  for (const name of safetensorsFiles(folder)) {
    const file = join(folder, name);
    for (const entry of readHeader(file)) {
      if (tensors.has(entry.name)) throw new SafetensorsError(`tensor ${entry.name} is in both ${tensors.get(entry.name)!.file} and ${file}`);
      tensors.set(entry.name, { ...entry, file });
    }
  }
  const tensor = (name: string): FolderTensor => {
    const found = tensors.get(name);
    if (!found) throw new SafetensorsError(`${folder}: no tensor ${name}`);
    return found;
  };
  const readBytes = (name: string): Uint8Array => {
    const entry = tensor(name);
    const fd = openSync(entry.file, "r");
    try {
      const bytes = readAt(fd, entry.fileOffset, entry.end - entry.begin);
      if (bytes.length !== entry.end - entry.begin) throw new SafetensorsError(`${entry.file}: tensor ${name} is truncated`);
      return bytes;
    } finally {
      closeSync(fd);
    }
  };
  return {
    tensors,
    readBytes,
    readFloat32: (name) => tensorToFloat32({ ...tensor(name), data: readBytes(name) }),
  };
}
