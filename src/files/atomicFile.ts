/**
 * Writing a file so that readers see either the old file or the whole new one: the bytes go to a
 * temporary sibling (created exclusively), are flushed to disk, then renamed over the target. On
 * failure the temporary file is removed and the error is rethrown as it came (callers name the
 * file in their own error type).
 */
import { chmodSync, closeSync, fsyncSync, openSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/** Writes every byte of `bytes` to `fd` (writeSync may write fewer than asked). */
export function writeAll(fd: number, bytes: Uint8Array): void {
  let offset = 0;
  while (offset < bytes.length) offset += writeSync(fd, bytes, offset, bytes.length - offset);
}

/** Runs `write` on a temporary sibling of `target`, then fsyncs it and renames it to `target` with `mode`. */
export function writeFileAtomically(target: string, write: (fd: number) => void, mode = 0o644): void {
  const temporary = join(dirname(target), `.${basename(target)}.${process.pid}.${Math.random().toString(36).slice(2, 10)}.tmp`);
  let fd: number | undefined;
  try {
    fd = openSync(temporary, "wx", mode);
    write(fd);
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    // The creation mode is masked by the umask; an executable must really be 0755.
    chmodSync(temporary, mode);
    renameSync(temporary, target);
  } catch (error) {
    if (fd !== undefined) {
      try {
        closeSync(fd);
      } catch {
        // failing already
      }
    }
    try {
      unlinkSync(temporary);
    } catch {
      // never created
    }
    throw error;
  }
}

/** writeFileAtomically with an asynchronous `write` (the file is written while other work runs). */
export async function writeFileAtomicallyAsync(target: string, write: (fd: number) => Promise<void>, mode = 0o644): Promise<void> {
  const temporary = join(dirname(target), `.${basename(target)}.${process.pid}.${Math.random().toString(36).slice(2, 10)}.tmp`);
  let fd: number | undefined;
  try {
    fd = openSync(temporary, "wx", mode);
    await write(fd);
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    chmodSync(temporary, mode);
    renameSync(temporary, target);
  } catch (error) {
    if (fd !== undefined) {
      try {
        closeSync(fd);
      } catch {
        // failing already
      }
    }
    try {
      unlinkSync(temporary);
    } catch {
      // never created
    }
    throw error;
  }
}
