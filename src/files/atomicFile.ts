/**
 * Writing a file so that readers see either the old file or the whole new one, even after a
 * crash: the bytes go to a temporary sibling (created exclusively, in the same folder so the
 * rename stays on one file system), are fsync'd, the file is renamed over the target, and the
 * folder is fsync'd so that the rename itself is durable. On failure the temporary file is
 * removed and the error is rethrown as it came (callers name the file in their own error type).
 * A crash can leave a temporary file behind: `temporaryTarget` recognises one, for cleanups.
 */
import * as fs from "node:fs";
import { basename, dirname, join } from "node:path";

export interface AtomicWriteOptions {
  /** The file's permission bits (default 0o644), applied whatever the umask. */
  mode?: number;
  /**
   * fsync the file before the rename and the folder after it (default true). Without it the
   * replacement is still atomic for readers, but a power loss may leave the old file or an empty
   * one: only for caches whose files are checked when read.
   */
  durable?: boolean;
}

/** A temporary file's name: "." + the target's name + "." + pid + "." + a counter + ".tmp". */
const TEMPORARY_NAME = /^\.(.+)\.\d+\.\d+\.tmp$/;
let temporaryCount = 0;

/** The name of the file a temporary file (by its name) was to become; null for other names. */
export function temporaryTarget(name: string): string | null {
  return TEMPORARY_NAME.exec(name)?.[1] ?? null;
}

/** Writes every byte of `bytes` to `fd` (writeSync may write fewer than asked). */
export function writeAll(fd: number, bytes: Uint8Array): void {
  let offset = 0;
  while (offset < bytes.length) offset += fs.writeSync(fd, bytes, offset, bytes.length - offset);
}

/** Writes bytes[0, length) at the file position without blocking the event loop, retrying short writes. */
export async function writeAllAsync(fd: number, bytes: Uint8Array, length = bytes.length): Promise<void> {
  let offset = 0;
  while (offset < length) {
    const written = await new Promise<number>((resolve, reject) =>
      fs.write(fd, bytes, offset, length - offset, null, (error, count) => (error ? reject(error) : resolve(count))),
    );
    if (written <= 0) throw new Error(`write returned ${written}`);
    offset += written;
  }
}

/** Runs `write` on a temporary sibling of `target`, then puts it in place as `target` (see the file's comment). */
export function writeFileAtomically(target: string, write: (fd: number) => void, options: AtomicWriteOptions = {}): void {
  const { mode = 0o644, durable = true } = options;
  const file = openTemporary(target, mode);
  try {
    write(file.fd!);
    if (durable) fs.fsyncSync(file.fd!);
    install(file, target, mode);
  } catch (error) {
    abandon(file);
    throw error;
  }
  if (durable) syncFolder(dirname(target));
}

/** writeFileAtomically with an asynchronous `write`; the fsyncs do not block the event loop either. */
export async function writeFileAtomicallyAsync(target: string, write: (fd: number) => Promise<void>, options: AtomicWriteOptions = {}): Promise<void> {
  const { mode = 0o644, durable = true } = options;
  const file = openTemporary(target, mode);
  try {
    await write(file.fd!);
    if (durable) await new Promise<void>((resolve, reject) => fs.fsync(file.fd!, (error) => (error ? reject(error) : resolve())));
    install(file, target, mode);
  } catch (error) {
    abandon(file);
    throw error;
  }
  if (durable) await syncFolderAsync(dirname(target));
}

interface TemporaryFile {
  readonly path: string;
  /** Undefined once closed. */
  fd: number | undefined;
}

function openTemporary(target: string, mode: number): TemporaryFile {
  const path = join(dirname(target), `.${basename(target)}.${process.pid}.${temporaryCount++}.tmp`);
  return { path, fd: fs.openSync(path, "wx", mode) };
}

/** Closes the temporary file and renames it over `target`. */
function install(file: TemporaryFile, target: string, mode: number): void {
  fs.closeSync(file.fd!);
  file.fd = undefined;
  // The creation mode is masked by the umask; an executable must really be 0755.
  fs.chmodSync(file.path, mode);
  fs.renameSync(file.path, target);
}

/** Closes and deletes the temporary file after a failure (errors here would hide the first one). */
function abandon(file: TemporaryFile): void {
  if (file.fd !== undefined) {
    try {
      fs.closeSync(file.fd);
    } catch {
      // failing already
    }
  }
  try {
    fs.unlinkSync(file.path);
  } catch {
    // never created, or already renamed
  }
}

function syncFolder(folder: string): void {
  const fd = fs.openSync(folder, "r");
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

async function syncFolderAsync(folder: string): Promise<void> {
  const handle = await fs.promises.open(folder, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
