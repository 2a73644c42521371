/**
 * QualityClient's warm-up against a real server on the committed quality model: it stores the
 * example's chunks with the storing policy it is given (the server says which policy served it,
 * and ctxr_kv_stored_total grows by one variant a document), except `full`, which stores nothing;
 * the measured question then reuses what the warm-up stored, every variant scored (sync mode).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { ContextService } from "../../src/online/contextService.ts";
import { QualityClient, type QualityPolicy } from "../../src/quality/qualityClient.ts";
import { exampleSeed } from "../../src/quality/qualityRandom.ts";
import { qualityExample } from "../../src/quality/qualityTasks.ts";
import { STORING_POLICIES } from "../../src/quality/storeMatrix.ts";
import { startServer, type RunningServer } from "../../src/server/serve.ts";
import { REPO_ROOT } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";

const MODEL = process.env.CTXR_QUALITY_MODEL ?? join(REPO_ROOT, "models", "quality");
const haveModel = existsSync(join(MODEL, "config.json"));
/** Disjoint from training, bench-quality and qualityModel.test.ts. */
const SEED = 0x57043001;

setDefaultTimeout(60_000);

describe.skipIf(!haveModel)("QualityClient.warmUp stores the chunks with the storing policy", () => {
  let engine: GenerationEngine;
  let service: ContextService;
  let server: RunningServer;
  let client: QualityClient;

  /** Documents some warm-up has stored: a later warm-up finds them, and stores only the others. */
  const cached = new Set<string>();

  beforeAll(async () => {
    engine = await GenerationEngine.open({ model: MODEL, runner: buildRunner(), threads: 2, prefixCache: false, reuseScoring: "sync" });
    service = await ContextService.open({ dataDir: null });
    server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
    client = new QualityClient(server.url);
    // The head (the prompt's first token) is stored once, by the first request that computes it.
    const primer = qualityExample("dependence", exampleSeed(SEED, 999));
    await client.warmUp(primer);
    for (const d of primer.documents) cached.add(d);
  });

  afterAll(async () => {
    await server?.stop(1000);
    await engine?.close();
    await service?.close();
  });

  STORING_POLICIES.forEach((storer: QualityPolicy, i) => {
    test(`stored by ${storer}`, async () => {
      const example = qualityExample("dependence", exampleSeed(SEED, i));
      const fresh = example.documents.filter((d) => !cached.has(d));
      expect(fresh.length).toBeGreaterThan(0);
      const warmUp = await client.warmUp(example, storer);
      expect(warmUp.storer).toBe(storer);
      expect(warmUp.servedPolicy).toBe(storer);
      expect(warmUp.documents).toBe(example.documents.length);
      // `full` neither reuses nor stores; every other policy stores each chunk it computed.
      expect(warmUp.chunksStored).toBe(storer === "full" ? 0 : fresh.length);
      if (storer !== "full") for (const d of fresh) cached.add(d);
      const answer = await client.ask(example, { policy: "cachecraft", ratio: 0.2 });
      // The question finds the head and every document some warm-up stored, each variant with its measured shift.
      const found = Object.values(answer.usage!.tier_hits!).reduce((a, b) => a + b, 0);
      expect(found).toBe(1 + example.documents.filter((d) => cached.has(d)).length);
      expect(answer.chunksReused).toBe(storer !== "full" || fresh.length < example.documents.length);
      expect(answer.usage!.chunks_unscored).toBe(0);
    });
  });
});

describe.skipIf(!haveModel)("QualityClient.settleScoring (--reuse-scoring idle)", () => {
  let engine: GenerationEngine;
  let service: ContextService;
  let server: RunningServer;

  beforeAll(async () => {
    engine = await GenerationEngine.open({ model: MODEL, runner: buildRunner(), threads: 2, prefixCache: false, reuseScoring: "idle" });
    service = await ContextService.open({ dataDir: null });
    server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
  });

  afterAll(async () => {
    await server?.stop(1000);
    await engine?.close();
    await service?.close();
  });

  test("waits until the idle time has scored what the warm-up stored: the question then meets no unscored chunk", async () => {
    const client = new QualityClient(server.url);
    const example = qualityExample("dependence", exampleSeed(SEED, 100));
    const warmUp = await client.warmUp(example, "prophet");
    expect(warmUp.chunksStored).toBeGreaterThanOrEqual(example.documents.length);
    await client.settleScoring(20_000);
    const queue = await client.scoringQueue();
    expect(queue.pending).toBe(0);
    // Every stored chunk but the one right after the head (its shift is zeros at once) was a job.
    expect(queue.scored).toBe(example.documents.length - 1);
    const answer = await client.ask(example, { policy: "cachecraft", ratio: 0.2 });
    expect(answer.chunksReused).toBe(true);
    expect(answer.usage!.chunks_unscored).toBe(0);
  });
});
