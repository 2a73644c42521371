/**
 * Writes a checkpoint's files into a folder: each file through a temporary sibling
 * and a rename (a failed run leaves no partial file), with its sha256 computed on
 * the way. The folder is created when missing; an existing folder must be empty
 * unless `overwrite` is set (stray *.safetensors shards would join the model).
 */
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, statSync } from "node:fs";
import { writeAll, writeFileAtomically } from "../files/atomicFile.ts";
import { join, resolve } from "node:path";
import type { ModelFile } from "./tinyModel.ts";

export interface WrittenFile {
  name: string;
  bytes: number;
  sha256: string;
}

export class ModelFolderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelFolderError";
  }
}

export function writeModelFolder(folder: string, files: readonly ModelFile[], options: { overwrite?: boolean } = {}): WrittenFile[] {
  const target = resolve(folder);
  let existing: string[] | null = null;
  try {
    if (!statSync(target).isDirectory()) throw new ModelFolderError(`${folder} exists and is not a folder`);
    existing = readdirSync(target);
  } catch (error) {
    if (error instanceof ModelFolderError) throw error;
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw new ModelFolderError(`cannot use ${folder}: ${(error as Error).message}`);
  }
  if (existing !== null && existing.length > 0 && !options.overwrite) {
    throw new ModelFolderError(`${folder} is not empty (${existing.length} entries); choose an empty or new folder, or pass --force to overwrite`);
  }
  if (existing === null) {
    try {
      mkdirSync(target, { recursive: true });
    } catch (error) {
      throw new ModelFolderError(`cannot create ${folder}: ${(error as Error).message}`);
    }
  }
  return files.map((file) => writeOneFile(target, file));
}

function writeOneFile(folder: string, file: ModelFile): WrittenFile {
  const path = join(folder, file.name);
  const hash = createHash("sha256");
  let written = 0;
  try {
    writeFileAtomically(path, (fd) => {
      for (const chunk of file.chunks()) {
        writeAll(fd, chunk);
        hash.update(chunk);
        written += chunk.length;
      }
      if (written !== file.bytes) throw new Error(`${file.name}: wrote ${written} bytes, ${file.bytes} expected`);
    });
  } catch (error) {
    throw new ModelFolderError(`cannot write ${path}: ${(error as Error).message}`);
  }
  return { name: file.name, bytes: written, sha256: hash.digest("hex") };
}
