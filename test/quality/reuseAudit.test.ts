/**
 * The live quality audit (src/engine/reuseAudit.ts) on the committed quality model, through the
 * HTTP API: on dependence questions whose chunks were cached after other neighbours (the warm-up of
 * src/quality/qualityClient.ts), `none` serves stale KV and the audit sees it (KL well above 0,
 * greedy answers that part from full prefill's), while cachecraft recomputing every reused token
 * agrees with full prefill exactly. So an audit that compared the wrong rows, or the reused side
 * with itself, fails here.
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

const EXAMPLES = 8;
/** Seeds disjoint from training, evaluation, bench-quality and qualityModel.test.ts. */
const TEST_SEED = 0x7e57a0d1;

const MODEL = process.env.CTXR_QUALITY_MODEL ?? join(REPO_ROOT, "models", "quality");
const haveModel = existsSync(join(MODEL, "config.json"));
if (!haveModel) console.warn(`reuseAudit.test.ts: SKIPPED — no model at ${MODEL}`);

setDefaultTimeout(60_000);

describe.skipIf(!haveModel)("the live audit on the quality model (dependence family)", () => {
  let engine: GenerationEngine;
  let service: ContextService;
  let server: RunningServer;
  let cells: any[] = [];

  beforeAll(async () => {
    engine = await GenerationEngine.open({ model: MODEL, runner: buildRunner(), threads: 2, prefixCache: false, reuseScoring: "sync", reuseScoringBudget: 1, reuseAuditRate: 1 });
    service = await ContextService.open({ dataDir: null });
    server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: () => {} });
    const client = new QualityClient(server.url);
    for (let i = 0; i < EXAMPLES; i++) {
      const example = qualityExample("dependence", exampleSeed(TEST_SEED, i));
      await client.warmUp(example);
      for (const cell of [{ policy: "none" as const }, { policy: "cachecraft" as const, ratio: 1 }]) {
        const answer = await client.ask(example, cell);
        expect(answer.chunksReused).toBe(true);
        await engine.scheduler.background.idle();
      }
    }
    const stats: any = await (await fetch(`${server.url}/v1/stats`)).json();
    cells = stats.engine.reuse_audit.cells;
    console.log(`reuseAudit.test.ts: ${JSON.stringify(cells)}`);
  }, 120_000);

  afterAll(async () => {
    await server?.stop(1000);
    await engine?.close();
    await service?.close();
  });

  test("every measured request was audited, in its policy's cell", () => {
    expect(cells.map((c) => [c.policy, c.ratio, c.count])).toEqual([
      ["none", 0, EXAMPLES],
      ["cachecraft", 1, EXAMPLES],
    ]);
  });

  test("cachecraft recomputing every reused token agrees with full prefill", () => {
    const cachecraft = cells.find((c) => c.policy === "cachecraft");
    expect(cachecraft).toMatchObject({ top1_share: 1, agreement_mean: 1 });
    expect(cachecraft.kl_p90).toBeLessThan(1e-4);
  });

  test("none on stale chunks shows a measurably worse figure", () => {
    const none = cells.find((c) => c.policy === "none");
    // Measured at 8 examples: KL mean 10.6 nats, top-1 share 0.125, agreement 0.016; thresholds with slack.
    expect(none.kl_mean).toBeGreaterThan(2);
    expect(none.top1_share).toBeLessThanOrEqual(0.5);
    expect(none.agreement_mean).toBeLessThan(0.3);
  });
});
