/**
 * File I/O for the commands: reading an input with a clear error, and writing an
 * output atomically (a temporary file in the same folder, renamed at the end), so
 * that a failed run never leaves a partial file nor clobbers an existing one.
 */
import { accessSync, constants, readFileSync, statSync, writeSync } from "node:fs";
import { writeFileAtomically as writeAtomically } from "../files/atomicFile.ts";
import { dirname, resolve } from "node:path";
import { InputError } from "./args.ts";

export function readInputText(path: string): string {
  try {
    if (statSync(path).isDirectory()) throw new InputError(`cannot read ${path}: it is a directory`);
    return readFileSync(path, "utf8");
  } catch (error) {
    if (error instanceof InputError) throw error;
    throw new InputError(`cannot read ${path}: ${describeIoError(error)}`);
  }
}

/** Fails early (before a long build) when the output cannot be written. */
export function checkOutputWritable(path: string): void {
  const folder = dirname(resolve(path));
  try {
    accessSync(folder, constants.W_OK);
  } catch (error) {
    throw new InputError(`cannot write ${path}: ${describeIoError(error)}`);
  }
  try {
    if (statSync(path).isDirectory()) throw new InputError(`cannot write ${path}: it is a directory`);
  } catch (error) {
    if (error instanceof InputError) throw error;
    // does not exist yet: fine
  }
}

/** Writes chunks to `path` through a temporary sibling file and a rename. */
export function writeFileAtomically(path: string, chunks: Iterable<string>): void {
  try {
    writeAtomically(resolve(path), (fd) => {
      let pending = "";
      for (const chunk of chunks) {
        pending += chunk;
        if (pending.length >= 1 << 20) {
          writeSync(fd, pending);
          pending = "";
        }
      }
      if (pending) writeSync(fd, pending);
    });
  } catch (error) {
    throw new Error(`cannot write ${path}: ${describeIoError(error)}`);
  }
}

export function describeIoError(error: unknown): string {
  const code = (error as NodeJS.ErrnoException)?.code;
  switch (code) {
    case "ENOENT":
      return "no such file or folder";
    case "EACCES":
    case "EPERM":
      return "permission denied";
    case "EISDIR":
      return "it is a directory";
    case "ENOTDIR":
      return "a part of the path is not a folder";
    case "ENOSPC":
      return "no space left on the device";
    default:
      return (error as Error)?.message ?? String(error);
  }
}
