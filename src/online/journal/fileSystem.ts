/**
 * Promise wrappers over node:fs callback APIs on raw file descriptors (the flush loop
 * awaits them, so the event loop keeps serving while a write or fsync is in progress).
 */
import * as fs from "node:fs";

function settle<T>(resolve: (value: T) => void, reject: (error: unknown) => void) {
  return (error: NodeJS.ErrnoException | null, value?: T) => (error ? reject(error) : resolve(value as T));
}

export function openFile(path: string, flags: string): Promise<number> {
  return new Promise((resolve, reject) => fs.open(path, flags, 0o644, settle(resolve, reject)));
}

export function closeFile(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.close(fd, settle(resolve, reject)));
}

/** Writes bytes[0, length) at the file position (the end, for files opened with "a"), retrying short writes. */
export { writeAllAsync as writeAll } from "../../files/atomicFile.ts";

/** fdatasync: the data and the metadata needed to read it back (the file size). */
export function syncData(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fdatasync(fd, settle(resolve, reject)));
}

/** fsync: data and all metadata. */
export function syncFile(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fsync(fd, settle(resolve, reject)));
}

export function truncateFile(fd: number, length: number): Promise<void> {
  return new Promise((resolve, reject) => fs.ftruncate(fd, length, settle(resolve, reject)));
}

/** fsync of a directory, so that file creations, renames and deletions in it are durable. */
export async function syncDirectory(dir: string): Promise<void> {
  const fd = await openFile(dir, "r");
  try {
    await syncFile(fd);
  } finally {
    await closeFile(fd);
  }
}

/** Deletes a file; a file already gone is fine. */
export async function removeFile(path: string): Promise<void> {
  try {
    await fs.promises.unlink(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
}
