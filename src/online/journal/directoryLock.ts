/**
 * A lock file that keeps two live processes (or two journals in one process) off one
 * journal directory.
 *
 * The lock file holds `{"pid", "startTime", "token"}`. It is created atomically with its
 * content (written to a private temporary file, then hard-linked to the lock name, which
 * fails if the lock exists). A lock whose process is gone — after `kill -9` or a crash — is
 * stale and taken over. On Linux the process start time (from /proc/<pid>/stat) is recorded
 * too, so a recycled pid does not look like the owner, and a process that has exited but not
 * yet been reaped by its parent — a zombie (state Z), e.g. the `bun` child of
 * `npm run ctxr -- serve` after `kill -9`, until npm reaps it — or one being
 * reaped (state X) is not a live owner either: it holds no file, writes nothing and will never
 * run again, though `kill(pid, 0)` still finds it.
 *
 * Why a lock file and not a lock the kernel drops when its process exits (flock, an OFD lock
 * with fcntl): node:fs, which Bun implements, has no call for either, so one would take native
 * code or bun:ffi into libc (experimental, and libc's name and `struct flock` layout differ by
 * platform). Reading the process state from /proc gives the same answer for a zombie: the
 * kernel closes a process's files (and drops its flocks) when it exits, before it is reaped.
 * Without /proc (not Linux), a zombie still looks alive.
 *
 * Limits: processes in different pid namespaces (containers) sharing one directory cannot
 * see each other; two processes taking over the same stale lock at the same instant can race.
 */
import { linkSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { JournalError, messageOf } from "./errors.ts";
import { LOCK_FILE } from "./journalFiles.ts";

interface LockContent {
  pid: number;
  startTime: string | null;
  token: string;
}

export interface DirectoryLock {
  readonly path: string;
  /** Removes the lock file if it is still ours. */
  release(): void;
}

export function acquireDirectoryLock(dir: string): DirectoryLock {
  const path = join(dir, LOCK_FILE);
  const content: LockContent = {
    pid: process.pid,
    startTime: processStartTime(process.pid),
    token: `${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`,
  };
  const tmpPath = `${path}.${content.token}.tmp`;
  writeFileSync(tmpPath, JSON.stringify(content) + "\n");
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        linkSync(tmpPath, path);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") {
          throw new JournalError(`cannot create the journal lock ${path}: ${messageOf(error)}`, { cause: error });
        }
      }
      const holder = readLock(path);
      if (holder === "missing") continue;
      if (holder !== "unreadable" && isAlive(holder)) {
        const who = holder.pid === process.pid ? "this process (the journal is already open)" : `process ${holder.pid}`;
        throw new JournalError(
          `journal directory ${dir} is locked by ${who}; only one server may use a data directory at a time (lock file ${path}): ` +
            `give this one its own (--data-dir DIR) or none (--in-memory: nothing kept across restarts)`,
        );
      }
      if (attempt >= 3) throw new JournalError(`cannot take over the stale journal lock ${path}`);
      // Stale (its process is gone) or unreadable (a lock is always written whole, so an
      // unreadable one is not from a live journal): take it over.
      try {
        unlinkSync(path);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      }
    }
  } finally {
    try {
      unlinkSync(tmpPath);
    } catch {
      // already gone
    }
  }
  let released = false;
  return {
    path,
    release() {
      if (released) return;
      released = true;
      const holder = readLock(path);
      if (typeof holder === "object" && holder.token === content.token) unlinkSync(path);
    },
  };
}

function readLock(path: string): LockContent | "missing" | "unreadable" {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT" ? "missing" : "unreadable";
  }
  try {
    const parsed = JSON.parse(text) as LockContent;
    return Number.isInteger(parsed.pid) && typeof parsed.token === "string" ? parsed : "unreadable";
  } catch {
    return "unreadable";
  }
}

function isAlive(holder: LockContent): boolean {
  try {
    process.kill(holder.pid, 0);
  } catch (error) {
    // EPERM: it exists but belongs to another user.
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  const stat = readProcessStat(holder.pid);
  if (stat !== null && hasExited(stat)) return false;
  if (holder.startTime === null) return true;
  return stat === null || stat.startTime === holder.startTime;
}

export interface ProcessStat {
  /** Field 3: R, S, D, Z (zombie: exited, not yet reaped), X (dead, being reaped), ... */
  state: string;
  /** Field 22: start time in clock ticks since boot (a string: it may exceed 2^53). */
  startTime: string;
}

/**
 * Parses the text of /proc/<pid>/stat. The command name (field 2) is in parentheses and may
 * itself hold spaces and parentheses (it is whatever the process named itself), so the fields
 * after it are taken from the last ")". Null if the text is not in that form.
 */
export function parseProcessStat(text: string): ProcessStat | null {
  const close = text.lastIndexOf(")");
  if (close < 0) return null;
  const fields = text.slice(close + 2).trimEnd().split(" ");
  const [state, startTime] = [fields[0], fields[19]];
  if (state === undefined || state.length !== 1 || startTime === undefined || !/^\d+$/.test(startTime)) return null;
  return { state, startTime };
}

/**
 * Whether a process whose /proc/<pid>/stat reads so has exited: Z or X. The state is that of
 * the main thread. It also reads Z for the few moments a killed multi-threaded process (Bun is
 * one) takes to end its other threads, which run no more code of it; and for a main thread
 * that called pthread_exit while other threads go on, which a lock holder (Bun or Node, whose
 * main thread ends only with the process) never does.
 */
export function hasExited(stat: ProcessStat): boolean {
  return stat.state === "Z" || stat.state === "X";
}

/** /proc/<pid>/stat parsed, or null where it cannot be read (no such process, not Linux). */
function readProcessStat(pid: number): ProcessStat | null {
  try {
    return parseProcessStat(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return null;
  }
}

function processStartTime(pid: number): string | null {
  return readProcessStat(pid)?.startTime ?? null;
}
