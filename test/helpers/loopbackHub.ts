/**
 * A loopback Hugging Face Hub for tests (never the real one): two servers on ephemeral ports,
 * the hub and its "CDN" (another origin, as the real hub's LFS redirects go to another host).
 *
 * The hub answers the file API ctxr uses:
 * - GET  /api/models/ORG/REPO/revision/REV?blobs=true  {sha, siblings: [{rfilename, size, blobId, lfs?}]}
 * - HEAD /ORG/REPO/resolve/REV/FILE   an LFS file: 302 to the CDN with X-Linked-Etag (its sha256),
 *                                     X-Linked-Size, X-Repo-Commit; a git file: 200, ETag (its git
 *                                     blob id), Content-Length, X-Repo-Commit
 * - GET  the same URL                 an LFS file: 302 to the CDN; a git file: its bytes
 * - 401 for a gated repository without its token, 404 (X-Error-Code) for an unknown repo, revision or file.
 * A repository may hold several revisions (branches or tags, each a commit with its own files); a
 * revision is asked by its name or its commit.
 * The CDN serves blobs by sha256, with Range (206 and Content-Range). A test can make the next
 * download of a file cut the connection after N bytes, or serve bytes other than its sha256 says.
 */
import { createHash } from "node:crypto";
import { serveForTest } from "./httpServe.ts";
import type { HttpServer } from "../../src/runtime/httpServerTypes.ts";

export interface HubRepoSpec {
  /** Path in the repository → bytes. Names ending in .gguf or .safetensors are stored with LFS. */
  files: Record<string, Uint8Array | string>;
  /** When set, the repository is gated: every hub request must carry "Authorization: Bearer <token>". */
  token?: string;
  commit?: string;
  /** The branch or tag this commit is (default "main"); adding a repository again under another revision adds that revision. */
  revision?: string;
}

export interface HubRequest {
  server: "hub" | "cdn";
  method: string;
  path: string;
  range: string | null;
  authorization: string | null;
}

interface StoredFile {
  bytes: Uint8Array;
  lfs: boolean;
  sha256: string;
  gitSha1: string;
}

interface StoredRevision {
  commit: string;
  files: Map<string, StoredFile>;
}

const isLfs = (path: string): boolean => /\.(gguf|safetensors)$/i.test(path);
const sha256Of = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex");
const gitSha1Of = (bytes: Uint8Array): string => createHash("sha1").update(`blob ${bytes.length}\0`).update(bytes).digest("hex");

export class LoopbackHub {
  readonly requests: HubRequest[] = [];
  /** When true the CDN answers every GET with the whole file (200), as a server without Range support. */
  ignoreRanges = false;
  private readonly repos = new Map<string, { token?: string; revisions: Map<string, StoredRevision> }>();
  private readonly cuts = new Map<string, { afterBytes: number; then: "cut" | "stall" }>();
  private readonly corrupted = new Set<string>();
  private constructor(
    private readonly hubServer: HttpServer,
    private readonly cdnServer: HttpServer,
  ) {}

  static start(): LoopbackHub {
    let hub: LoopbackHub | undefined;
    const hubServer = serveForTest((request) => hub!.answerHub(request));
    const cdnServer = serveForTest((request) => hub!.answerCdn(request));
    hub = new LoopbackHub(hubServer, cdnServer);
    return hub;
  }

  get url(): string {
    return `http://127.0.0.1:${this.hubServer.port}`;
  }

  get cdnUrl(): string {
    return `http://127.0.0.1:${this.cdnServer.port}`;
  }

  addRepo(repo: string, spec: HubRepoSpec): void {
    const files = new Map<string, StoredFile>();
    for (const [path, content] of Object.entries(spec.files)) {
      const bytes = typeof content === "string" ? new TextEncoder().encode(content) : content;
      files.set(path, { bytes, lfs: isLfs(path), sha256: sha256Of(bytes), gitSha1: gitSha1Of(bytes) });
    }
    const revision = spec.revision ?? "main";
    const commit = spec.commit ?? createHash("sha1").update(repo + revision + [...files.values()].map((file) => file.sha256).join()).digest("hex");
    const revisions = this.repos.get(repo)?.revisions ?? new Map<string, StoredRevision>();
    revisions.set(revision, { commit, files });
    this.repos.set(repo, { ...(spec.token === undefined ? {} : { token: spec.token }), revisions });
  }

  private stored(repo: string, path: string, revision = "main"): StoredFile {
    return this.repos.get(repo)!.revisions.get(revision)!.files.get(path)!;
  }

  /** The next CDN download of this file sends `afterBytes` bytes of the asked range, then breaks the connection. */
  cutNextDownload(repo: string, path: string, afterBytes: number): void {
    this.cuts.set(this.stored(repo, path).sha256, { afterBytes, then: "cut" });
  }

  /** The next CDN download of this file sends `afterBytes` bytes of the asked range, then nothing more, keeping the connection open. */
  stallNextDownload(repo: string, path: string, afterBytes: number): void {
    this.cuts.set(this.stored(repo, path).sha256, { afterBytes, then: "stall" });
  }

  /** From now on the CDN serves this file with its last byte flipped (its sha256 no longer matches). */
  corrupt(repo: string, path: string): void {
    this.corrupted.add(this.stored(repo, path).sha256);
  }

  sha256(repo: string, path: string, revision = "main"): string {
    return this.stored(repo, path, revision).sha256;
  }

  commit(repo: string, revision = "main"): string {
    return this.repos.get(repo)!.revisions.get(revision)!.commit;
  }

  /** Forgets every repository, cut, corruption and logged request (between tests). */
  reset(): void {
    this.requests.length = 0;
    this.repos.clear();
    this.cuts.clear();
    this.corrupted.clear();
    this.ignoreRanges = false;
  }

  /** Requests of a kind (e.g. CDN GETs), for assertions. */
  count(server: "hub" | "cdn", method: string): number {
    return this.requests.filter((request) => request.server === server && request.method === method).length;
  }

  async stop(): Promise<void> {
    await Promise.all([this.hubServer.stop(true), this.cdnServer.stop(true)]);
  }

  private log(server: "hub" | "cdn", request: Request): void {
    const url = new URL(request.url);
    this.requests.push({ server, method: request.method, path: url.pathname, range: request.headers.get("range"), authorization: request.headers.get("authorization") });
  }

  private answerHub(request: Request): Response {
    this.log("hub", request);
    const url = new URL(request.url);
    const listing = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(url.pathname);
    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    const repoName = listing?.[1] ?? resolve?.[1];
    if (repoName === undefined) return new Response("not a hub path", { status: 404 });
    const repo = this.repos.get(repoName);
    const error = (status: number, code: string, message: string): Response =>
      new Response(JSON.stringify({ error: message }), { status, headers: { "X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json" } });
    // As the real hub: an unknown repository answers like a gated one to a request without a token.
    if (repo === undefined) return request.headers.get("authorization") === null ? error(401, "RepoNotFound", "Invalid username or password.") : error(404, "RepoNotFound", "Repository not found");
    if (repo.token !== undefined && request.headers.get("authorization") !== `Bearer ${repo.token}`) {
      return error(401, "GatedRepo", `Access to model ${repoName} is restricted. You must have access to it and be authenticated to access it.`);
    }
    const revision = decodeURIComponent((listing ?? resolve)![2]!);
    const stored = repo.revisions.get(revision) ?? [...repo.revisions.values()].find((entry) => entry.commit === revision);
    if (stored === undefined) return error(404, "RevisionNotFound", `Invalid rev id: ${revision}`);
    if (listing !== null) {
      if (url.searchParams.get("blobs") !== "true") return error(400, "BadRequest", "this loopback hub only lists with blobs=true");
      const siblings = [...stored.files].map(([path, file]) => ({
        rfilename: path,
        size: file.bytes.length,
        blobId: file.gitSha1,
        ...(file.lfs ? { lfs: { sha256: file.sha256, size: file.bytes.length, pointerSize: 134 } } : {}),
      }));
      return Response.json({ id: repoName, sha: stored.commit, siblings });
    }
    const path = resolve![3]!.split("/").map(decodeURIComponent).join("/");
    const file = stored.files.get(path);
    if (file === undefined) return error(404, "EntryNotFound", `${path} does not exist on "${revision}"`);
    const common = { "X-Repo-Commit": stored.commit };
    if (file.lfs) {
      return new Response(null, {
        status: 302,
        headers: { ...common, Location: `${this.cdnUrl}/blobs/${file.sha256}?name=${encodeURIComponent(path)}`, "X-Linked-Etag": `"${file.sha256}"`, "X-Linked-Size": String(file.bytes.length), ETag: `"${file.gitSha1}"` },
      });
    }
    return rangedAnswer(request, file.bytes, { ...common, ETag: `"${file.gitSha1}"` }, null);
  }

  private answerCdn(request: Request): Response {
    this.log("cdn", request);
    const sha = /^\/blobs\/([0-9a-f]{64})$/.exec(new URL(request.url).pathname)?.[1];
    const file = sha === undefined ? undefined : [...this.repos.values()].flatMap((repo) => [...repo.revisions.values()].flatMap((revision) => [...revision.files.values()])).find((entry) => entry.sha256 === sha);
    if (file === undefined) return new Response("no such blob", { status: 404 });
    let bytes = file.bytes;
    if (this.corrupted.has(sha!)) {
      bytes = bytes.slice();
      bytes[bytes.length - 1]! ^= 0xff;
    }
    const cut = this.cuts.get(sha!) ?? null;
    this.cuts.delete(sha!);
    const asked = this.ignoreRanges ? new Request(request.url, { method: request.method }) : request;
    return rangedAnswer(asked, bytes, { ETag: `"${sha}"` }, cut);
  }
}

/** The bytes, or the asked range of them (206); with `cut`, the body breaks (or stalls) after that many bytes. */
function rangedAnswer(request: Request, bytes: Uint8Array, headers: Record<string, string>, cut: { afterBytes: number; then: "cut" | "stall" } | null): Response {
  const range = /^bytes=(\d+)-$/.exec(request.headers.get("range") ?? "");
  let start = 0;
  let status = 200;
  const head: Record<string, string> = { ...headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream" };
  if (range !== null) {
    start = Number(range[1]);
    if (start >= bytes.length) return new Response(null, { status: 416, headers: { ...head, "Content-Range": `bytes */${bytes.length}` } });
    status = 206;
    head["Content-Range"] = `bytes ${start}-${bytes.length - 1}/${bytes.length}`;
  }
  const body = bytes.subarray(start);
  head["Content-Length"] = String(body.length);
  if (request.method === "HEAD") return new Response(null, { status, headers: head });
  if (cut === null) return new Response(body, { status, headers: head });
  let sent = false;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (!sent) {
        sent = true;
        controller.enqueue(body.slice(0, cut.afterBytes));
        return;
      }
      if (cut.then === "stall") return new Promise<void>(() => {}); // never another byte
      await new Promise((resolve) => setTimeout(resolve, 20));
      controller.error(new Error("loopback hub: connection cut"));
    },
  });
  return new Response(stream, { status, headers: head });
}
