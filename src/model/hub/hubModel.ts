/**
 * A model by name, made local: `hf:ORG/REPO[:QUANT|FILE][@REV]` → the files it needs in the cache
 * (modelCache.ts) → the path to serve (a GGUF file, or a snapshot folder).
 *
 * Online, one listing of the repository says the commit and its files; files already in that
 * commit's snapshot are used as they are (a second run downloads nothing), the others are
 * fetched (hubDownload.ts). Offline (or when the hub cannot be reached at all) the cache alone
 * answers, from the commit the revision last resolved to, and a missing file is named.
 */
import { formatHubReference, type HubReference } from "./hubReference.ts";
import { chooseHubFiles } from "./hubFileChoice.ts";
import { expectedDigest, unquoteEtag } from "./hubChecksum.ts";
import { HubClient, type RepoFile } from "./hubClient.ts";
import { dirname } from "node:path";
import { diskShortage, downloadBlob, type DownloadProgress } from "./hubDownload.ts";
import { HubError, HubUnreachableError } from "./hubErrors.ts";
import type { HubSettings } from "./hubSettings.ts";
import { RepoCache } from "./modelCache.ts";
import { existsSync, statSync, statfsSync } from "node:fs";

export interface HubModel {
  reference: HubReference;
  kind: "gguf" | "folder";
  /** What to serve: the GGUF file, or the snapshot folder. */
  path: string;
  /** The model's default id in the API: ORG/REPO. */
  name: string;
  commit: string;
  /** The model's files (paths in the repository) and their sizes. */
  files: { path: string; bytes: number }[];
  /** Bytes fetched from the hub in this run (0: all from the cache). */
  fetchedBytes: number;
  /** hub: listed online; offline: the cache, as asked; unreachable: the cache, the hub not answering. */
  source: "hub" | "offline" | "unreachable";
}

export interface FetchHubModelOptions {
  progress: DownloadProgress;
  /** Tests replace the client (its fetch); the default talks to settings.endpoint. */
  client?: HubClient;
  /** Download tuning for tests (see BlobDownload). */
  download?: { attempts?: number; stallMs?: number; retryDelayMs?: number };
  /** Free bytes on the disk of a folder; tests replace it (default: statfs). */
  freeBytes?: (folder: string) => number;
}

const statfsFree = (folder: string): number => {
  const { bavail, bsize } = statfsSync(folder);
  return Number(bavail) * Number(bsize);
};

const OFFLINE_HOW = "--offline, CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1";

export async function fetchHubModel(reference: HubReference, settings: HubSettings, options: FetchHubModelOptions): Promise<HubModel> {
  const cache = new RepoCache(settings.cacheDir, reference.repo);
  if (settings.offline) return fromCache(reference, cache, "offline", `offline (${OFFLINE_HOW})`);
  const client = options.client ?? new HubClient(settings);
  let listing;
  try {
    listing = await client.listFiles(reference.repo, reference.revision);
  } catch (error) {
    if (!(error instanceof HubUnreachableError)) throw error;
    const cached = fromCache(reference, cache, "unreachable", error.message);
    options.progress.note(`${error.message}; using the copy in the cache (commit ${cached.commit.slice(0, 12)})`);
    return cached;
  }
  const { commit } = listing;
  const choice = chooseHubFiles(reference.repo, listing.files.map((file) => file.path), reference.selector);
  checkModelFits(reference.repo, cache, commit, choice.files, listing.files, options.freeBytes ?? statfsFree);
  let fetchedBytes = 0;
  for (const file of choice.files) {
    if (cache.hasSnapshotFile(commit, file)) continue;
    const head = await client.headFile(reference.repo, commit, file);
    const listed = listing.files.find((entry) => entry.path === file);
    const digest = expectedDigest(head.etag, listed?.lfsSha256 ?? null);
    const etag = head.etag === null ? "" : unquoteEtag(head.etag).replace(/[^A-Za-z0-9._-]/g, "_");
    const blobName = digest?.hex ?? etag;
    if (blobName === "" || blobName.startsWith(".")) throw new HubError(`${reference.repo}: ${file}: the hub sent no etag for it, so its download cannot be checked; is HF_ENDPOINT a Hugging Face Hub?`);
    fetchedBytes += await downloadBlob({
      client,
      cache,
      repo: reference.repo,
      commit,
      file,
      blobName,
      size: head.size ?? listed?.size ?? null,
      digest,
      progress: options.progress,
      ...options.download,
    });
    cache.linkSnapshotFile(commit, file, blobName);
  }
  if (reference.revision !== commit) cache.writeRef(reference.revision, commit); // a commit needs no ref (as huggingface_hub)
  return describeModel(reference, cache, commit, choice, fetchedBytes, "hub");
}

/**
 * Refuses a model of several files (a split GGUF, a sharded folder) that cannot fit on the cache's
 * disk before its first byte: each file's own check (hubDownload.ts) would only find out at a
 * later part. Blobs already complete, and LFS parts already downloaded, are not counted again.
 */
function checkModelFits(repo: string, cache: RepoCache, commit: string, files: readonly string[], listed: readonly RepoFile[], freeBytes: (folder: string) => number): void {
  if (files.length < 2) return;
  let needed = 0;
  for (const file of files) {
    if (cache.hasSnapshotFile(commit, file)) continue;
    const entry = listed.find((candidate) => candidate.path === file);
    if (entry?.size == null) continue;
    const blob = entry.lfsSha256 === null ? null : cache.blobPath(entry.lfsSha256);
    if (blob !== null && existsSync(blob)) continue;
    const part = blob === null ? 0 : existsSync(`${blob}.part`) ? statSync(`${blob}.part`).size : 0;
    needed += Math.max(0, entry.size - part);
  }
  if (needed === 0) return;
  cache.prepareBlobs();
  const folder = dirname(cache.blobPath("x"));
  const shortage = diskShortage(needed, freeBytes(folder), folder);
  if (shortage !== null) throw new HubError(`${repo}: the model's ${files.length} files together: ${shortage}`);
}

function fromCache(reference: HubReference, cache: RepoCache, source: "offline" | "unreachable", why: string): HubModel {
  const name = formatHubReference(reference);
  const commit = cache.readRef(reference.revision) ?? (/^[0-9a-f]{40}$/.test(reference.revision) ? reference.revision : null);
  const files = commit === null ? [] : cache.snapshotFiles(commit);
  if (commit === null || files.length === 0) {
    throw new HubError(`${why}: the cache has no copy of ${reference.repo} (revision ${reference.revision}) in ${cache.folder}; fetch it once where the hub is reachable: ctxr model pull ${name}`);
  }
  let choice;
  try {
    choice = chooseHubFiles(reference.repo, files, reference.selector, " in the cache");
  } catch (error) {
    if (error instanceof HubError) throw new HubError(`${why}: ${error.message}; fetch it where the hub is reachable: ctxr model pull ${name}`);
    throw error;
  }
  return describeModel(reference, cache, commit, choice, 0, source);
}

function describeModel(reference: HubReference, cache: RepoCache, commit: string, choice: ReturnType<typeof chooseHubFiles>, fetchedBytes: number, source: HubModel["source"]): HubModel {
  return {
    reference,
    kind: choice.kind,
    path: choice.kind === "gguf" ? cache.snapshotFile(commit, choice.file) : cache.snapshotFolder(commit),
    name: reference.repo,
    commit,
    files: choice.files.map((path) => ({ path, bytes: statSync(cache.snapshotFile(commit, path)).size })),
    fetchedBytes,
    source,
  };
}
