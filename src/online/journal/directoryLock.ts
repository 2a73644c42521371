/**
 * A lock file that keeps two live processes (or two journals in one process) off one
 * journal directory.
 *
 * The lock file holds `{"pid", "startTime", "token"}`. It is created atomically with its
 * content (written to a private temporary file, then hard-linked to the lock name, which
 * fails if the lock exists). A lock whose process is gone — after `kill -9` or a crash — is
 * stale and taken over. On Linux the process start time (from /proc/<pid>/stat) is recorded
 * too, so a recycled pid does not look like the owner.
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
          `journal directory ${dir} is locked by ${who}; only one server may use a data directory at a time (lock file ${path})`,
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
  if (holder.startTime === null) return true;
  const startTime = processStartTime(holder.pid);
  return startTime === null || startTime === holder.startTime;
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or null off Linux. */
function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) is in parentheses and may contain spaces.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[19] ?? null;
  } catch {
    return null;
  }
}
