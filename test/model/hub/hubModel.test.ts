/** Models by name against a loopback hub (test/helpers/loopbackHub.ts): downloads, resume, checks, cache, offline, tokens. */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { existsSync, lstatSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { HubClient } from "../../../src/model/hub/hubClient.ts";
import { diskShortage, type DownloadProgress } from "../../../src/model/hub/hubDownload.ts";
import { fetchHubModel } from "../../../src/model/hub/hubModel.ts";
import { parseHubReference } from "../../../src/model/hub/hubReference.ts";
import { hubSettingsFromEnv, modelCacheDir, type HubSettings } from "../../../src/model/hub/hubSettings.ts";
import { RepoCache } from "../../../src/model/hub/modelCache.ts";
import { tempFolder } from "../../helpers/cli.ts";
import { LoopbackHub } from "../../helpers/loopbackHub.ts";

const GGUF_REPO = "test-org/tiny-GGUF";
const Q4 = "tiny-Q4_K_M.gguf";
const Q8 = "tiny-Q8_0.gguf";
// Not real GGUF files (downloads do not parse them): large enough to cut in the middle.
const q4Bytes = new Uint8Array(300_000).map((_, i) => (i * 31 + 7) & 0xff);
const q8Bytes = new Uint8Array(500_000).map((_, i) => (i * 17 + 3) & 0xff);

let hub: LoopbackHub;
let folder: { path: string; cleanup(): void };
let notes: string[];

const quietProgress = (): DownloadProgress => ({ start() {}, advance() {}, note: (text) => void notes.push(text), end() {} });
const settings = (extra: Partial<HubSettings> = {}): HubSettings => ({ endpoint: hub.url, token: null, offline: false, cacheDir: join(folder.path, "cache"), ...extra });
const fetchModel = (reference: string, extra: Partial<HubSettings> = {}, download: { attempts?: number; stallMs?: number; retryDelayMs?: number } = { retryDelayMs: 0 }) =>
  fetchHubModel(parseHubReference(reference), settings(extra), { progress: quietProgress(), download });
const blobsOf = (repo: string): string[] => {
  const blobs = join(new RepoCache(settings().cacheDir, repo).folder, "blobs");
  return existsSync(blobs) ? readdirSync(blobs).sort() : [];
};

beforeAll(() => {
  hub = LoopbackHub.start();
});
afterAll(async () => {
  await hub.stop();
});
beforeEach(() => {
  folder = tempFolder("ctxr-hub-model-");
  notes = [];
  hub.reset();
  hub.addRepo(GGUF_REPO, { files: { "README.md": "# tiny\n", [Q4]: q4Bytes, [Q8]: q8Bytes } });
});
afterEach(() => folder.cleanup());

describe("a GGUF model by name", () => {
  test("hf:ORG/REPO fetches the Q4_K_M file through the CDN redirect; a second run downloads nothing", async () => {
    const model = await fetchModel(`hf:${GGUF_REPO}`);
    expect(model.kind).toBe("gguf");
    expect(model.name).toBe(GGUF_REPO);
    expect(model.commit).toBe(hub.commit(GGUF_REPO));
    expect(model.path).toBe(join(settings().cacheDir, "models--test-org--tiny-GGUF", "snapshots", hub.commit(GGUF_REPO), Q4));
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q4Bytes);
    expect(lstatSync(model.path).isSymbolicLink()).toBe(true);
    expect(model.fetchedBytes).toBe(q4Bytes.length);
    expect(blobsOf(GGUF_REPO)).toEqual([hub.sha256(GGUF_REPO, Q4)]); // only the chosen file, no .part left
    expect(hub.count("hub", "HEAD")).toBe(1);
    expect(hub.count("cdn", "GET")).toBe(1);
    expect(readFileSync(join(settings().cacheDir, "models--test-org--tiny-GGUF", "refs", "main"), "utf8")).toBe(hub.commit(GGUF_REPO));

    hub.requests.length = 0;
    const again = await fetchModel(`hf:${GGUF_REPO}`);
    expect(again.path).toBe(model.path);
    expect(again.fetchedBytes).toBe(0);
    expect(hub.requests.map((request) => `${request.server} ${request.method}`)).toEqual(["hub GET"]); // the listing only
  });

  test(":QUANT picks by quantization, case-insensitively; an unknown one lists what there is", async () => {
    const model = await fetchModel(`hf:${GGUF_REPO}:q8_0`);
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q8Bytes);
    await expect(fetchModel(`hf:${GGUF_REPO}:Q2_K`)).rejects.toThrow(`${GGUF_REPO}: no GGUF file carries the quantization 'Q2_K'; its GGUF files: ${Q4}, ${Q8}`);
  });

  test("resumes with a Range request after the connection is cut mid-file", async () => {
    hub.cutNextDownload(GGUF_REPO, Q4, 100_000);
    const model = await fetchModel(`hf:${GGUF_REPO}`);
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q4Bytes);
    const downloads = hub.requests.filter((request) => request.server === "cdn");
    expect(downloads.map((request) => request.range)).toEqual([null, "bytes=100000-"]);
    expect(model.fetchedBytes).toBe(q4Bytes.length);
    expect(notes.some((note) => /the connection broke.*at 0\.1 MiB of 0\.3 MiB; resuming \(try 2 of 5\)/.test(note))).toBe(true);
  });

  test("a connection that stops sending counts as cut, and is resumed", async () => {
    hub.stallNextDownload(GGUF_REPO, Q4, 50_000);
    const model = await fetchModel(`hf:${GGUF_REPO}`, {}, { retryDelayMs: 0, stallMs: 300 });
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q4Bytes);
    expect(hub.requests.filter((request) => request.server === "cdn").map((request) => request.range)).toEqual([null, "bytes=50000-"]);
    expect(notes.some((note) => note.startsWith(`${Q4}: no bytes for 0.3 s at 0.0 MiB of 0.3 MiB; resuming (try 2 of 5)`))).toBe(true);
  });

  test("a run that gives up keeps the part; the next run resumes from it", async () => {
    hub.cutNextDownload(GGUF_REPO, Q4, 120_000);
    const failed = fetchModel(`hf:${GGUF_REPO}`, {}, { retryDelayMs: 0, attempts: 1 });
    await expect(failed).rejects.toThrow(/tiny-Q4_K_M\.gguf: the download stopped at 120000 of 300000 bytes \(the connection broke.*\) after 1 tries; run the command again to resume from there/);
    expect(blobsOf(GGUF_REPO)).toEqual([`${hub.sha256(GGUF_REPO, Q4)}.part`]);
    hub.requests.length = 0;
    const model = await fetchModel(`hf:${GGUF_REPO}`);
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q4Bytes);
    expect(hub.requests.filter((request) => request.server === "cdn").map((request) => request.range)).toEqual(["bytes=120000-"]);
    expect(model.fetchedBytes).toBe(300_000 - 120_000);
  });

  test("a download whose sha256 is not the hub's is refused and removed", async () => {
    hub.corrupt(GGUF_REPO, Q4);
    await expect(fetchModel(`hf:${GGUF_REPO}`)).rejects.toThrow(
      new RegExp(`tiny-Q4_K_M\\.gguf: checksum mismatch: the hub's sha256 is ${hub.sha256(GGUF_REPO, Q4)}, the download's is [0-9a-f]{64}; the download is refused and removed`),
    );
    expect(blobsOf(GGUF_REPO)).toEqual([]);
    expect(existsSync(join(new RepoCache(settings().cacheDir, GGUF_REPO).folder, "refs", "main"))).toBe(false);
  });

  test("a server that ignores Range gets the file written from its start", async () => {
    const cache = new RepoCache(settings().cacheDir, GGUF_REPO);
    cache.prepareBlobs();
    writeFileSync(cache.partPath(hub.sha256(GGUF_REPO, Q4)), q4Bytes.subarray(0, 100_000));
    hub.ignoreRanges = true;
    const model = await fetchModel(`hf:${GGUF_REPO}`);
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q4Bytes);
    expect(hub.requests.filter((request) => request.server === "cdn").map((request) => request.range)).toEqual(["bytes=100000-"]);
    expect(notes).toContain(`${Q4}: the hub does not resume downloads (it answered the whole file); starting over`);
  });

  test("a stale part longer than the file is dropped, not trusted", async () => {
    const cache = new RepoCache(settings().cacheDir, GGUF_REPO);
    cache.prepareBlobs();
    writeFileSync(cache.partPath(hub.sha256(GGUF_REPO, Q4)), new Uint8Array(q4Bytes.length + 10));
    const model = await fetchModel(`hf:${GGUF_REPO}`);
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q4Bytes);
    expect(hub.requests.filter((request) => request.server === "cdn").map((request) => request.range)).toEqual([null]);
  });
});

test("a file that does not fit on the disk is refused before it starts, naming the folder and XDG_CACHE_HOME", () => {
  expect(diskShortage(10 * 2 ** 20, 100 * 2 ** 20, "/c/blobs")).toBeNull();
  expect(diskShortage(100 * 2 ** 20, 100 * 2 ** 20, "/c/blobs")).toBe("needs 100.0 MiB more and /c/blobs has 100.0 MiB free; free some space, or set XDG_CACHE_HOME to a folder on a larger disk");
});

describe("two downloaders sharing a cache", () => {
  test("a part locked by a live process is left alone; a lock whose process is gone is taken over", async () => {
    const cache = new RepoCache(settings().cacheDir, GGUF_REPO);
    cache.prepareBlobs();
    const lock = `${cache.partPath(hub.sha256(GGUF_REPO, Q4))}.lock`;
    writeFileSync(lock, String(process.pid)); // this process is alive
    await expect(fetchModel(`hf:${GGUF_REPO}`)).rejects.toThrow(`${GGUF_REPO}: ${Q4}: another ctxr (pid ${process.pid}) is downloading it into this cache (${lock}); wait for it to finish, or stop it`);
    expect(hub.count("cdn", "GET")).toBe(0);
    writeFileSync(lock, "4194305"); // above Linux's largest pid: no such process
    const model = await fetchModel(`hf:${GGUF_REPO}`);
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q4Bytes);
    expect(existsSync(lock)).toBe(false);
  });
});

describe("the cache, offline", () => {
  test("offline serves what is cached, with no request; what is missing is named", async () => {
    const online = await fetchModel(`hf:${GGUF_REPO}:Q8_0`);
    hub.requests.length = 0;
    const offline = await fetchModel(`hf:${GGUF_REPO}:Q8_0`, { offline: true });
    expect(offline).toMatchObject({ path: online.path, source: "offline", fetchedBytes: 0 });
    expect(hub.requests).toEqual([]);
    await expect(fetchModel(`hf:${GGUF_REPO}:Q4_K_M`, { offline: true })).rejects.toThrow(
      `offline (--offline, CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1): ${GGUF_REPO}: no GGUF file carries the quantization 'Q4_K_M' in the cache; its GGUF files in the cache: ${Q8}; fetch it where the hub is reachable: ctxr model pull hf:${GGUF_REPO}:Q4_K_M`,
    );
    await expect(fetchModel("hf:test-org/never-fetched", { offline: true })).rejects.toThrow(/the cache has no copy of test-org\/never-fetched \(revision main\) in .*models--test-org--never-fetched; fetch it once where the hub is reachable: ctxr model pull hf:test-org\/never-fetched/);
    expect(hub.requests).toEqual([]);
  });

  test("a hub that does not answer falls back to the cache, saying so", async () => {
    const online = await fetchModel(`hf:${GGUF_REPO}`);
    const dead = { endpoint: "http://127.0.0.1:9" };
    const cached = await fetchModel(`hf:${GGUF_REPO}`, dead);
    expect(cached).toMatchObject({ path: online.path, source: "unreachable" });
    expect(notes.at(-1)).toMatch(/^cannot reach the hub at http:\/\/127\.0\.0\.1:9 .*; using the copy in the cache \(commit [0-9a-f]{12}\)$/);
    await expect(fetchModel("hf:test-org/never-fetched", dead)).rejects.toThrow(/cannot reach the hub at http:\/\/127\.0\.0\.1:9 .*: the cache has no copy of test-org\/never-fetched/);
  });

  test("the cache folder follows XDG_CACHE_HOME; offline follows CTXR_OFFLINE and HF_HUB_OFFLINE", () => {
    expect(modelCacheDir({ XDG_CACHE_HOME: "/x/cache", HOME: "/home/u" })).toBe("/x/cache/ctxr/models");
    expect(modelCacheDir({ HOME: "/home/u" })).toBe("/home/u/.cache/ctxr/models");
    expect(modelCacheDir({ XDG_CACHE_HOME: "relative", HOME: "/home/u" })).toBe("/home/u/.cache/ctxr/models");
    expect(hubSettingsFromEnv({ HOME: "/h" })).toEqual({ endpoint: "https://huggingface.co", token: null, offline: false, cacheDir: "/h/.cache/ctxr/models" });
    expect(hubSettingsFromEnv({ HOME: "/h", CTXR_OFFLINE: "1" }).offline).toBe(true);
    expect(hubSettingsFromEnv({ HOME: "/h", HF_HUB_OFFLINE: "true" }).offline).toBe(true);
    expect(hubSettingsFromEnv({ HOME: "/h", HF_HUB_OFFLINE: "0" }).offline).toBe(false);
    expect(hubSettingsFromEnv({ HOME: "/h", HF_ENDPOINT: "http://127.0.0.1:5000/", HF_TOKEN: "hf_x" })).toMatchObject({ endpoint: "http://127.0.0.1:5000", token: "hf_x" });
    expect(() => hubSettingsFromEnv({ HF_ENDPOINT: "ftp://x" })).toThrow(/HF_ENDPOINT 'ftp:\/\/x' must be an http/);
  });
});

describe("gated and missing models", () => {
  beforeEach(() => hub.addRepo("gated-org/secret-GGUF", { token: "hf_secret", files: { "s-Q4_K_M.gguf": q4Bytes } }));

  test("HF_TOKEN is sent to the hub as a bearer token, and never to the CDN", async () => {
    const model = await fetchModel("hf:gated-org/secret-GGUF", { token: "hf_secret" });
    expect(new Uint8Array(readFileSync(model.path))).toEqual(q4Bytes);
    const hubRequests = hub.requests.filter((request) => request.server === "hub");
    expect(hubRequests.map((request) => request.method)).toEqual(["GET", "HEAD", "GET"]); // listing, file headers, the redirect to the CDN
    for (const request of hubRequests) expect(request.authorization).toBe("Bearer hf_secret");
    for (const request of hub.requests.filter((request) => request.server === "cdn")) expect(request.authorization).toBeNull();
  });

  test("401 without a token says to set HF_TOKEN; with a wrong one, to accept the terms", async () => {
    await expect(fetchModel("hf:gated-org/secret-GGUF")).rejects.toThrow(/^gated-org\/secret-GGUF: the hub answered 401 \("Access to model gated-org\/secret-GGUF is restricted.*"\): the model is gated or private \(or does not exist\); set HF_TOKEN to an access token \(http:\/\/127\.0\.0\.1:\d+\/settings\/tokens\)$/);
    await expect(fetchModel("hf:gated-org/secret-GGUF", { token: "hf_wrong" })).rejects.toThrow(/the token in HF_TOKEN has no access; if the model is gated, accept its terms at http:\/\/127\.0\.0\.1:\d+\/gated-org\/secret-GGUF/);
  });

  test("404: an unknown repository (with a token), revision or file", async () => {
    await expect(fetchModel("hf:test-org/no-such-model", { token: "hf_any" })).rejects.toThrow(/^no model test-org\/no-such-model on http:\/\/127\.0\.0\.1:\d+ \("Repository not found"\); check the name/);
    await expect(fetchHubModel(parseHubReference(`hf:${GGUF_REPO}`, "v9"), settings(), { progress: quietProgress() })).rejects.toThrow(/test-org\/tiny-GGUF has no revision 'v9'/);
    const client = new HubClient(settings());
    await expect(client.headFile(GGUF_REPO, "main", "missing.gguf")).rejects.toThrow(/test-org\/tiny-GGUF: missing\.gguf: no such file at revision 'main'/);
  });
});

describe("a split GGUF model by name", () => {
  const SPLIT_REPO = "test-org/big-GGUF";
  const parts = [1, 2, 3].map((no) => `big-Q4_K_M-0000${no}-of-00003.gguf`);
  const partBytes = parts.map((_, index) => new Uint8Array(150_000 + index * 1000).map((__, i) => (i * (index + 3) + 1) & 0xff));
  beforeEach(() => hub.addRepo(SPLIT_REPO, { files: { "README.md": "big\n", ...Object.fromEntries(parts.map((part, index) => [part, partBytes[index]!])), "big-Q8_0.gguf": q8Bytes } }));

  test("every part lands in the snapshot, each checked and resumed like one file; the path is the first part; offline finds them", async () => {
    hub.cutNextDownload(SPLIT_REPO, parts[1]!, 60_000);
    const model = await fetchModel(`hf:${SPLIT_REPO}`);
    expect(model.kind).toBe("gguf");
    expect(model.path).toBe(join(settings().cacheDir, "models--test-org--big-GGUF", "snapshots", hub.commit(SPLIT_REPO), parts[0]!));
    expect(model.files).toEqual(parts.map((path, index) => ({ path, bytes: partBytes[index]!.length })));
    for (const [index, part] of parts.entries()) expect(new Uint8Array(readFileSync(join(model.path, "..", part)))).toEqual(partBytes[index]!);
    expect(model.fetchedBytes).toBe(partBytes.reduce((sum, bytes) => sum + bytes.length, 0));
    expect(hub.requests.filter((request) => request.server === "cdn").map((request) => request.range)).toEqual([null, null, "bytes=60000-", null]);
    expect(blobsOf(SPLIT_REPO)).toEqual(parts.map((part) => hub.sha256(SPLIT_REPO, part)).sort());

    const again = await fetchModel(`hf:${SPLIT_REPO}:${parts[2]}`);
    expect(again.path).toBe(model.path);
    expect(again.fetchedBytes).toBe(0);
    const offline = await fetchModel(`hf:${SPLIT_REPO}`, { offline: true });
    expect(offline.files.map((file) => file.path)).toEqual(parts);
    rmSync(join(new RepoCache(settings().cacheDir, SPLIT_REPO).folder, "blobs", hub.sha256(SPLIT_REPO, parts[2]!)));
    await expect(fetchModel(`hf:${SPLIT_REPO}`, { offline: true })).rejects.toThrow(`the repository in the cache lacks part ${parts[2]}; fetch it where the hub is reachable: ctxr model pull hf:${SPLIT_REPO}`);
  });

  test("a split that cannot fit on the cache's disk is refused before its first byte; parts already there are not counted again", async () => {
    const total = partBytes.reduce((sum, bytes) => sum + bytes.length, 0);
    const fetchWithFree = (free: number) => fetchHubModel(parseHubReference(`hf:${SPLIT_REPO}`), settings(), { progress: quietProgress(), freeBytes: () => free });
    await expect(fetchWithFree(total)).rejects.toThrow(new RegExp(`^${SPLIT_REPO}: the model's 3 files together: needs 0\\.4 MiB more and .*blobs has 0\\.4 MiB free; free some space, or set XDG_CACHE_HOME`));
    expect(hub.count("cdn", "GET")).toBe(0);
    await fetchModel(`hf:${SPLIT_REPO}`);
    rmSync(join(new RepoCache(settings().cacheDir, SPLIT_REPO).folder, "snapshots"), { recursive: true }); // blobs stay
    expect((await fetchWithFree(0)).fetchedBytes).toBe(0);
  });

  test("a part whose sha256 is not the hub's is refused, and the model with it", async () => {
    hub.corrupt(SPLIT_REPO, parts[2]!);
    await expect(fetchModel(`hf:${SPLIT_REPO}`)).rejects.toThrow(new RegExp(`big-Q4_K_M-00003-of-00003\\.gguf: checksum mismatch`));
    await expect(fetchModel(`hf:${SPLIT_REPO}`, { offline: true })).rejects.toThrow(/the cache has no copy of test-org\/big-GGUF/);
  });
});

describe("revisions (@REV)", () => {
  const V2_Q4 = new Uint8Array(200_000).map((_, i) => (i * 7 + 1) & 0xff);
  beforeEach(() => hub.addRepo(GGUF_REPO, { revision: "v2", files: { [Q4]: V2_Q4 } }));

  test("two revisions of one repository land in their own snapshots, each asked by name or commit; offline finds each", async () => {
    const main = await fetchModel(`hf:${GGUF_REPO}:Q4_K_M`);
    const v2 = await fetchModel(`hf:${GGUF_REPO}:Q4_K_M@v2`);
    expect(v2.commit).toBe(hub.commit(GGUF_REPO, "v2"));
    expect(v2.commit).not.toBe(main.commit);
    expect(v2.path).toBe(join(settings().cacheDir, "models--test-org--tiny-GGUF", "snapshots", v2.commit, Q4));
    expect(new Uint8Array(readFileSync(v2.path))).toEqual(V2_Q4);
    expect(new Uint8Array(readFileSync(main.path))).toEqual(q4Bytes);
    const resolved = hub.requests.filter((request) => request.method === "HEAD").map((request) => request.path);
    expect(resolved).toEqual([`/${GGUF_REPO}/resolve/${main.commit}/${Q4}`, `/${GGUF_REPO}/resolve/${v2.commit}/${Q4}`]);
    const refs = join(settings().cacheDir, "models--test-org--tiny-GGUF", "refs");
    expect(readdirSync(refs).sort()).toEqual(["main", "v2"]);
    expect(readFileSync(join(refs, "v2"), "utf8")).toBe(v2.commit);

    const byCommit = await fetchModel(`hf:${GGUF_REPO}@${v2.commit}`);
    expect(byCommit.path).toBe(v2.path);
    expect(byCommit.fetchedBytes).toBe(0);
    expect(readdirSync(refs).sort()).toEqual(["main", "v2"]); // a commit writes no ref

    for (const [reference, expected] of [[`hf:${GGUF_REPO}@v2`, v2.path], [`hf:${GGUF_REPO}`, main.path], [`hf:${GGUF_REPO}@${v2.commit}`, v2.path]] as const) {
      const offline = await fetchModel(reference, { offline: true });
      expect(offline.path).toBe(expected);
      expect(offline.source).toBe("offline");
    }
    // v2 has no Q8_0: the cache of main does not stand in for it.
    await expect(fetchModel(`hf:${GGUF_REPO}:Q8_0@v2`, { offline: true })).rejects.toThrow(/no GGUF file carries the quantization 'Q8_0' in the cache/);
  });

  test("a revision the hub does not know is named, online and offline", async () => {
    await expect(fetchModel(`hf:${GGUF_REPO}@v3`)).rejects.toThrow(/^test-org\/tiny-GGUF has no revision 'v3' on http:\/\/127\.0\.0\.1:\d+ \("Invalid rev id: v3"\)$/);
    await expect(fetchModel(`hf:${GGUF_REPO}@v3`, { offline: true })).rejects.toThrow(/the cache has no copy of test-org\/tiny-GGUF \(revision v3\).*ctxr model pull hf:test-org\/tiny-GGUF@v3$/);
  });
});

describe("a safetensors model by name", () => {
  test("the folder's files land in one snapshot folder; git files are checked by their blob id", async () => {
    hub.addRepo("test-org/tiny-folder", {
      files: { "config.json": '{"model_type":"llama"}', "model.safetensors": q8Bytes, "tokenizer.json": "{}", "tokenizer_config.json": "{}", "README.md": "x", "pytorch_model.bin": "y" },
    });
    const model = await fetchModel("hf:test-org/tiny-folder");
    expect(model.kind).toBe("folder");
    expect(readdirSync(model.path).sort()).toEqual(["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
    expect(readFileSync(join(model.path, "config.json"), "utf8")).toBe('{"model_type":"llama"}');
    expect(model.files.map((file) => file.bytes)).toEqual([22, q8Bytes.length, 2, 2]);
    // config.json came from the hub itself (no CDN), named by its git blob id.
    expect(hub.requests.filter((request) => request.server === "cdn").length).toBe(1);
    expect(blobsOf("test-org/tiny-folder").every((name) => /^[0-9a-f]{40}$|^[0-9a-f]{64}$/.test(name))).toBe(true);
  });
});
