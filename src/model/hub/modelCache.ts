/**
 * The model cache on disk, one folder a repository, in the Hugging Face Hub's own layout:
 *
 *   models--ORG--REPO/refs/<revision>        the commit the revision pointed to when last fetched
 *   models--ORG--REPO/blobs/<etag>           complete, checked files, named by their etag (digest)
 *   models--ORG--REPO/blobs/<etag>.part      a download in progress, resumed from its length
 *   models--ORG--REPO/snapshots/<commit>/F   the repository's file F at that commit (a link to its blob)
 *
 * A snapshot file exists only once its blob is complete and checked, so a file in a snapshot is
 * a file ready to serve; the ref is written once every file a model needs is there, so offline
 * mode knows which commit to use.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { writeAll, writeFileAtomically } from "../../files/atomicFile.ts";

export class RepoCache {
  /** The repository's folder in the cache. */
  readonly folder: string;

  constructor(
    readonly cacheDir: string,
    /** "ORG/REPO". */
    readonly repo: string,
  ) {
    this.folder = join(cacheDir, `models--${repo.replace("/", "--")}`);
  }

  blobPath(name: string): string {
    return join(this.folder, "blobs", name);
  }

  partPath(name: string): string {
    return `${this.blobPath(name)}.part`;
  }

  snapshotFolder(commit: string): string {
    return join(this.folder, "snapshots", commit);
  }

  snapshotFile(commit: string, file: string): string {
    return join(this.snapshotFolder(commit), file);
  }

  /** The commit `revision` resolved to when last fetched; null when never. */
  readRef(revision: string): string | null {
    const path = join(this.folder, "refs", revision);
    if (!existsSync(path)) return null;
    const commit = readFileSync(path, "utf8").trim();
    return commit === "" ? null : commit;
  }

  writeRef(revision: string, commit: string): void {
    const path = join(this.folder, "refs", revision);
    mkdirSync(dirname(path), { recursive: true });
    writeFileAtomically(path, (fd) => writeAll(fd, new TextEncoder().encode(commit)), { durable: false });
  }

  /** True when the snapshot holds the file and its blob is there. */
  hasSnapshotFile(commit: string, file: string): boolean {
    return existsSync(this.snapshotFile(commit, file)); // follows the link: false when the blob is gone
  }

  /** Puts the complete blob `blobName` into the commit's snapshot as `file` (a relative link, replaced atomically). */
  linkSnapshotFile(commit: string, file: string, blobName: string): void {
    const path = this.snapshotFile(commit, file);
    mkdirSync(dirname(path), { recursive: true });
    const temporary = `${path}.${process.pid}.link`;
    rmSync(temporary, { force: true });
    symlinkSync(relative(dirname(path), this.blobPath(blobName)), temporary);
    renameSync(temporary, path);
  }

  /** The files of a snapshot whose blobs are there, as paths in the repository, sorted. */
  snapshotFiles(commit: string): string[] {
    const root = this.snapshotFolder(commit);
    if (!existsSync(root)) return [];
    const found: string[] = [];
    const walk = (folder: string): void => {
      for (const entry of readdirSync(folder, { withFileTypes: true })) {
        const path = join(folder, entry.name);
        if (entry.isDirectory()) walk(path);
        else if (existsSync(path) && statSync(path).isFile()) found.push(relative(root, path).split("\\").join("/"));
      }
    };
    walk(root);
    return found.sort();
  }

  /** Creates the blobs folder (before a download). */
  prepareBlobs(): void {
    mkdirSync(join(this.folder, "blobs"), { recursive: true });
  }
}
