/**
 * --reuse-target-agreement steered by the live audit (src/engine/reuseTarget.ts fed by
 * src/engine/reuseAudit.ts's samples), on the committed quality model through the HTTP API. At
 * prophet@0.05 dependence answers part from full prefill's (BENCHMARKS.md: 10% of them agree), so
 * the audit's first samples bring the cell's agreement under 0.99 and the ratio a request that names
 * none gets must rise at once; a request that names its ratio keeps it.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { ContextService } from "../../src/online/contextService.ts";
import { QualityClient } from "../../src/quality/qualityClient.ts";
import { exampleSeed } from "../../src/quality/qualityRandom.ts";
import { qualityExample } from "../../src/quality/qualityTasks.ts";
import { startServer, type RunningServer } from "../../src/server/serve.ts";
import { REPO_ROOT } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";

/** Seeds disjoint from training, evaluation, the benchmarks and the other quality tests. */
const TEST_SEED = 0x7e57a7e0;
const MODEL = process.env.CTXR_QUALITY_MODEL ?? join(REPO_ROOT, "models", "quality");
const haveModel = existsSync(join(MODEL, "config.json"));
if (!haveModel) console.warn(`reuseTargetLive.test.ts: SKIPPED — no model at ${MODEL}`);

setDefaultTimeout(120_000);

describe.skipIf(!haveModel)("a quality target steered by the live audit", () => {
  let engine: GenerationEngine;
  let service: ContextService;
  let server: RunningServer;

  beforeAll(async () => {
    engine = await GenerationEngine.open({
      model: MODEL,
      runner: buildRunner(),
      threads: 2,
      prefixCache: false,
      reuseScoring: "sync",
      reuseScoringBudget: 1,
      recomputeRatio: 0.05,
      reuseTarget: { target: 0.99, minRatio: 0.05, maxRatio: 0.6, auditRate: 1 },
    });
    service = await ContextService.open({ dataDir: null });
    server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
  }, 120_000);

  afterAll(async () => {
    await server?.stop(1000);
    await engine?.close();
    await service?.close();
  });

  test("the audit runs at the target's rate, and the ratio rises once its samples fall short", async () => {
    expect(engine.scheduler.reuseAudit.stats.rate).toBe(1);
    const client = new QualityClient(server.url);
    const served: number[] = [];
    for (let i = 0; i < 6; i++) {
      const example = qualityExample("dependence", exampleSeed(TEST_SEED, i));
      await client.warmUp(example);
      const answer = await client.ask(example, { policy: "prophet" });
      expect(answer.chunksReused).toBe(true);
      served.push((answer.usage as { recompute_ratio?: number }).recompute_ratio!);
      await engine.scheduler.background.idle();
    }
    expect(served[0]).toBe(0.05);
    expect(Math.max(...served.slice(1))).toBeGreaterThan(0.05);
    const stats: any = await (await fetch(`${server.url}/v1/stats`)).json();
    const cell = stats.engine.reuse_target.cells.find((c: any) => c.policy === "prophet");
    expect(cell.samples).toBe(6);
    expect(cell.moves_up).toBeGreaterThanOrEqual(1);
    // The warm-ups (cachecraft at ratio 0) are audited too when they reuse a chunk an earlier example stored.
    expect(stats.engine.reuse_audit.audited).toBeGreaterThanOrEqual(6);
    // Each audit is filed under the ratio its request was served at, the controller's.
    const auditedRatios = stats.engine.reuse_audit.cells.filter((c: any) => c.policy === "prophet").map((c: any) => c.ratio);
    expect(auditedRatios.sort()).toEqual([...new Set(served)].sort());
    // A request that names its ratio keeps it (and is audited, but at its own ratio).
    const named = await client.ask(qualityExample("dependence", exampleSeed(TEST_SEED, 99)), { policy: "prophet", ratio: 0.3 });
    expect((named.usage as { recompute_ratio?: number }).recompute_ratio).toBe(0.3);
  });
});
