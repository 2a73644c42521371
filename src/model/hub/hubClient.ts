/**
 * The Hugging Face Hub's file API, as huggingface_hub uses it:
 *
 * - GET  {endpoint}/api/models/{repo}/revision/{revision}?blobs=true: the commit and the files
 *   (siblings: rfilename, size, lfs.sha256);
 * - HEAD {endpoint}/{repo}/resolve/{revision}/{file}: X-Repo-Commit, X-Linked-Etag (an LFS
 *   file's SHA-256) or ETag, X-Linked-Size or Content-Length; redirects within the hub are
 *   followed, a redirect to a CDN is not (its headers are the file's);
 * - GET of the same URL, Range for a resume, redirects followed by hand so that the token
 *   (HF_TOKEN) goes to the hub's origin only, never to the CDN.
 *
 * 401/403 (gated, private, or unknown without a token) and 404 become HubErrors that say what
 * to do; no answer at all is a HubUnreachableError.
 */
import { z } from "zod";
import { VERSION } from "../../version.ts";
import { HubError, HubUnreachableError } from "./hubErrors.ts";
import type { HubSettings } from "./hubSettings.ts";

export interface RepoFile {
  path: string;
  size: number | null;
  /** The SHA-256 of an LFS file's bytes; null for files in git. */
  lfsSha256: string | null;
}

export interface RepoListing {
  /** The commit the revision points to. */
  commit: string;
  files: RepoFile[];
}

export interface FileHead {
  commit: string | null;
  etag: string | null;
  size: number | null;
}

const LISTING = z.object({
  sha: z.string().regex(/^[0-9a-f]{40}$/i),
  siblings: z.array(
    z.object({
      rfilename: z.string().min(1),
      size: z.number().int().nonnegative().optional(),
      lfs: z.object({ sha256: z.string().optional(), size: z.number().optional() }).nullable().optional(),
    }),
  ),
});

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const MAX_REDIRECTS = 10;
const METADATA_TIMEOUT_MS = 30_000;

const encodePath = (path: string): string => path.split("/").map(encodeURIComponent).join("/");

export class HubClient {
  private readonly origin: string;

  constructor(
    readonly settings: HubSettings,
    private readonly fetchImpl: typeof fetch = fetch,
  ) {
    this.origin = new URL(settings.endpoint).origin;
  }

  fileUrl(repo: string, revision: string, file: string): string {
    return `${this.settings.endpoint}/${repo}/resolve/${encodeURIComponent(revision)}/${encodePath(file)}`;
  }

  async listFiles(repo: string, revision: string): Promise<RepoListing> {
    const url = `${this.settings.endpoint}/api/models/${repo}/revision/${encodeURIComponent(revision)}?blobs=true`;
    const response = await this.request(url, { method: "GET", signal: AbortSignal.timeout(METADATA_TIMEOUT_MS) }, "follow");
    if (!response.ok) throw await this.answerError(response, repo, revision, null);
    let body: unknown;
    try {
      body = await response.json();
    } catch (error) {
      throw new HubError(`${repo}: the hub's file list at ${url} is not JSON (${(error as Error).message}); is HF_ENDPOINT a Hugging Face Hub?`);
    }
    const parsed = LISTING.safeParse(body);
    if (!parsed.success) throw new HubError(`${repo}: the hub's file list at ${url} lacks the commit (sha) or the files (siblings); is HF_ENDPOINT a Hugging Face Hub?`);
    return {
      commit: parsed.data.sha.toLowerCase(),
      files: parsed.data.siblings.map((sibling) => ({ path: sibling.rfilename, size: sibling.lfs?.size ?? sibling.size ?? null, lfsSha256: sibling.lfs?.sha256 ?? null })),
    };
  }

  async headFile(repo: string, revision: string, file: string): Promise<FileHead> {
    let url = this.fileUrl(repo, revision, file);
    for (let hop = 0; ; hop++) {
      const response = await this.request(url, { method: "HEAD", headers: { "Accept-Encoding": "identity" }, signal: AbortSignal.timeout(METADATA_TIMEOUT_MS) }, "manual");
      const location = response.headers.get("location");
      if (REDIRECTS.has(response.status) && location !== null && hop < MAX_REDIRECTS) {
        const next = new URL(location, url);
        // A redirect within the hub (a renamed repository) is followed; one to a CDN carries the file's headers already.
        if (next.origin === this.origin) {
          url = next.href;
          continue;
        }
      } else if (!response.ok) {
        throw await this.answerError(response, repo, revision, file);
      }
      const size = response.headers.get("x-linked-size") ?? response.headers.get("content-length");
      return {
        commit: response.headers.get("x-repo-commit"),
        etag: response.headers.get("x-linked-etag") ?? response.headers.get("etag"),
        size: size === null || !/^\d+$/.test(size) ? null : Number(size),
      };
    }
  }

  /** GET of a file from byte `from` on (a Range request when from > 0); the answer's status is the caller's to read. */
  async openFile(repo: string, revision: string, file: string, from: number, signal: AbortSignal): Promise<Response> {
    let url = this.fileUrl(repo, revision, file);
    const headers: Record<string, string> = { "Accept-Encoding": "identity", ...(from > 0 ? { Range: `bytes=${from}-` } : {}) };
    for (let hop = 0; ; hop++) {
      const response = await this.request(url, { method: "GET", headers, signal }, "manual");
      const location = response.headers.get("location");
      if (!REDIRECTS.has(response.status) || location === null) {
        if (response.status >= 400 && response.status !== 416) throw await this.answerError(response, repo, revision, file);
        return response;
      }
      if (hop === MAX_REDIRECTS) throw new HubError(`${repo}: ${file}: more than ${MAX_REDIRECTS} redirects from the hub`);
      await response.body?.cancel();
      url = new URL(location, url).href;
    }
  }

  private async request(url: string, init: RequestInit, redirect: "follow" | "manual"): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set("User-Agent", `ctxr/${VERSION}`);
    if (this.settings.token !== null && new URL(url).origin === this.origin) headers.set("Authorization", `Bearer ${this.settings.token}`);
    try {
      return await this.fetchImpl(url, { ...init, headers, redirect });
    } catch (error) {
      if (init.signal?.aborted && (error as Error).name !== "TimeoutError") throw error;
      const reason = (error as Error).name === "TimeoutError" ? "no answer in time" : (error as Error).message;
      throw new HubUnreachableError(`cannot reach the hub at ${new URL(url).origin} (${reason})`);
    }
  }

  private async answerError(response: Response, repo: string, revision: string, file: string | null): Promise<HubError> {
    await response.body?.cancel().catch(() => {});
    const what = file === null ? repo : `${repo}: ${file}`;
    const hubSays = response.headers.get("x-error-message");
    const said = hubSays ? ` ("${hubSays}")` : "";
    const code = response.headers.get("x-error-code");
    if (response.status === 401 || response.status === 403) {
      return new HubError(
        this.settings.token === null
          ? `${what}: the hub answered ${response.status}${said}: the model is gated or private (or does not exist); set HF_TOKEN to an access token (${this.settings.endpoint}/settings/tokens)`
          : `${what}: the hub answered ${response.status}${said}: the token in HF_TOKEN has no access; if the model is gated, accept its terms at ${this.settings.endpoint}/${repo}`,
      );
    }
    if (response.status === 404) {
      if (code === "RevisionNotFound") return new HubError(`${repo} has no revision '${revision}' on ${this.settings.endpoint}${said}`);
      if (file !== null || code === "EntryNotFound") return new HubError(`${what}: no such file at revision '${revision}' on ${this.settings.endpoint}${said}`);
      return new HubError(`no model ${repo} on ${this.settings.endpoint}${said}; check the name (ORG/REPO, as in the model's page URL)`);
    }
    return new HubError(`${what}: the hub answered ${response.status} ${response.statusText}${said}`);
  }
}
