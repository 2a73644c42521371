/**
 * Downloading one file of a repository into the cache: streamed to `<blob>.part`, resumed with
 * a Range request after a cut (in this run, a few times, and in a later run from what the
 * `.part` file holds), checked against the hub's size and digest, and only then renamed to its
 * blob. A file that fails the check is refused and its `.part` removed, so the next run starts
 * afresh.
 */
import { closeSync, existsSync, openSync, readFileSync, renameSync, rmSync, statfsSync, statSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { open } from "node:fs/promises";
import { sleep } from "../../runtime/sleep.ts";
import { fileDigest, type FileDigest } from "./hubChecksum.ts";
import type { HubClient } from "./hubClient.ts";
import { HubError, HubUnreachableError } from "./hubErrors.ts";
import type { RepoCache } from "./modelCache.ts";

/** What a download reports as it goes (a progress bar on a terminal, plain lines otherwise). */
export interface DownloadProgress {
  /** A file's download starts (or resumes, or starts over) with `done` of `total` bytes already there. */
  start(file: string, total: number | null, done: number): void;
  advance(bytes: number): void;
  /** A line worth telling the user (a resume after a cut). */
  note(text: string): void;
  end(file: string): void;
}

export interface BlobDownload {
  client: HubClient;
  cache: RepoCache;
  repo: string;
  /** The commit to fetch the file at. */
  commit: string;
  file: string;
  /** The blob's name in the cache (its digest, else its etag). */
  blobName: string;
  /** The hub's size of the file; null when it gave none. */
  size: number | null;
  digest: FileDigest | null;
  progress: DownloadProgress;
  /** Connections tried before giving up (default 5). */
  attempts?: number;
  /** A connection that delivers nothing for this long counts as cut (default 60 s). */
  stallMs?: number;
  /** The wait before the n-th retry is n times this (default 500 ms). */
  retryDelayMs?: number;
}

const fileSize = (path: string): number => (existsSync(path) ? statSync(path).size : 0);
const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

/** Why `needed` bytes do not fit in `free` (with 1% of them kept free), or null when they do. */
export function diskShortage(needed: number, free: number, folder: string): string | null {
  if (needed <= free * 0.99) return null;
  return `needs ${mib(needed)} more and ${folder} has ${mib(free)} free; free some space, or set XDG_CACHE_HOME to a folder on a larger disk`;
}

/** Fetches the file into its blob; returns the bytes fetched over the network in this run. */
export async function downloadBlob(download: BlobDownload): Promise<number> {
  const { cache, repo, file } = download;
  const blob = cache.blobPath(download.blobName);
  if (existsSync(blob)) return 0; // a blob is only there once checked
  cache.prepareBlobs();
  const part = cache.partPath(download.blobName);
  const unlock = lockDownload(`${part}.lock`, repo, file);
  try {
    return await downloadLocked(download, part, blob);
  } finally {
    unlock();
  }
}

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Takes the part's lock (see the file's comment); returns its release. */
function lockDownload(lock: string, repo: string, file: string): () => void {
  for (;;) {
    try {
      const fd = openSync(lock, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => rmSync(lock, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const pid = Number(readFileSync(lock, "utf8").trim());
    if (Number.isSafeInteger(pid) && pid > 0 && processIsAlive(pid)) {
      throw new HubError(`${repo}: ${file}: another ctxr (pid ${pid}) is downloading it into this cache (${lock}); wait for it to finish, or stop it`);
    }
    rmSync(lock, { force: true }); // left by a process that is gone
  }
}

async function downloadLocked(download: BlobDownload, part: string, blob: string): Promise<number> {
  const { client, repo, commit, file, size, progress } = download;
  const attempts = download.attempts ?? 5;
  const stallMs = download.stallMs ?? 60_000;
  const retryDelayMs = download.retryDelayMs ?? 500;
  if (existsSync(blob)) return 0; // completed by the process that held the lock before
  let fetched = 0;
  let started = false;
  let lastProblem = "";
  for (let attempt = 1; ; attempt++) {
    let have = fileSize(part);
    if (size !== null && have > size) {
      rmSync(part, { force: true });
      have = 0;
    }
    if (size !== null && have === size) break;
    if (attempt > attempts) {
      throw new HubError(
        `${repo}: ${file}: the download stopped at ${have} of ${size ?? "?"} bytes (${lastProblem}) after ${attempts} tries; ` +
          `run the command again to resume from there (the part is kept in ${part})`,
      );
    }
    if (!started) {
      if (size !== null) {
        const { bavail, bsize } = statfsSync(dirname(part));
        const shortage = diskShortage(size - have, Number(bavail) * Number(bsize), dirname(part));
        if (shortage !== null) throw new HubError(`${repo}: ${file}: ${shortage}`);
      }
      progress.start(file, size, have);
      if (have > 0) progress.note(`${file}: resuming an earlier download at ${mib(have)} of ${size === null ? "?" : mib(size)}`);
      started = true;
    } else {
      progress.note(`${file}: ${lastProblem} at ${mib(have)} of ${size === null ? "?" : mib(size)}; resuming (try ${attempt} of ${attempts})`);
      await sleep(retryDelayMs * (attempt - 1));
    }
    const controller = new AbortController();
    const answerTimer = setTimeout(() => controller.abort(), stallMs);
    const response = await client
      .openFile(repo, commit, file, have, controller.signal)
      .catch((error: unknown) => {
        if (error instanceof HubError && !(error instanceof HubUnreachableError)) throw error; // 401, 404, ...: trying again will not help
        lastProblem = controller.signal.aborted ? `no answer for ${stallMs / 1000} s` : (error as Error).message;
        return null;
      })
      .finally(() => clearTimeout(answerTimer));
    if (response === null) continue;
    if (response.status === 416) {
      // The hub has no bytes past the part: complete when the size is unknown, else the part is stale.
      await response.body?.cancel();
      if (size === null && have > 0) break;
      rmSync(part, { force: true });
      lastProblem = "the hub refused the range";
      continue;
    }
    let append = false;
    if (response.status === 206) {
      const start = /^bytes (\d+)-/.exec(response.headers.get("content-range") ?? "")?.[1];
      if (start === undefined || Number(start) !== have) {
        await response.body?.cancel();
        rmSync(part, { force: true });
        lastProblem = `the hub answered a range other than the one asked (${response.headers.get("content-range")})`;
        continue;
      }
      append = true;
    } else if (response.status !== 200) {
      await response.body?.cancel();
      lastProblem = `the hub answered ${response.status}`;
      continue;
    }
    if (!append && have > 0) {
      progress.note(`${file}: the hub does not resume downloads (it answered the whole file); starting over`);
      progress.start(file, size, 0);
    }
    const problem = await streamToFile(response, part, append, controller, stallMs, (bytes) => {
      fetched += bytes;
      progress.advance(bytes);
    });
    if (problem === null && (size === null || fileSize(part) === size)) break;
    lastProblem = problem ?? `the connection ended early`;
  }
  if (started) progress.end(file);
  await checkPart(download, part);
  renameSync(part, blob);
  return fetched;
}

/** Appends (or writes) the answer's body to the file; returns why it stopped early, or null when the body ended. */
async function streamToFile(response: Response, path: string, append: boolean, controller: AbortController, stallMs: number, advance: (bytes: number) => void): Promise<string | null> {
  if (response.body === null) return "the hub sent no body";
  const handle = await open(path, append ? "a" : "w");
  const reader = response.body.getReader();
  let stalled = false;
  let timer = setTimeout(() => ((stalled = true), controller.abort()), stallMs);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return null;
      clearTimeout(timer);
      timer = setTimeout(() => ((stalled = true), controller.abort()), stallMs);
      await handle.write(value);
      advance(value.length);
    }
  } catch (error) {
    return stalled ? `no bytes for ${stallMs / 1000} s` : `the connection broke (${(error as Error).message.replace(/\. For more information.*$/s, "")})`;
  } finally {
    clearTimeout(timer);
    await handle.close();
  }
}

/** Refuses a complete part whose size or digest is not the hub's, removing it. */
async function checkPart(download: BlobDownload, part: string): Promise<void> {
  const { repo, file, size, digest } = download;
  const refuse = (what: string): never => {
    rmSync(part, { force: true });
    throw new HubError(`${repo}: ${file}: ${what}; the download is refused and removed: run the command again to download it afresh`);
  };
  const actual = fileSize(part);
  if (size !== null && actual !== size) refuse(`the hub says ${size} bytes, the download has ${actual}`);
  if (digest === null) return;
  const got = await fileDigest(part, digest.algorithm);
  const name = digest.algorithm === "sha256" ? "sha256" : "git blob id";
  if (got !== digest.hex) refuse(`checksum mismatch: the hub's ${name} is ${digest.hex}, the download's is ${got}`);
}
