/**
 * The live quality audit (src/engine/reuseAudit.ts) through a real server on an ephemeral port,
 * with the real CPU runner and the tiny model: at rate 1 a request served with reused chunks
 * yields a sample in /v1/stats and /metrics; a cachecraft request that recomputes every reused
 * token agrees with full prefill (KL ≈ 0); rate 0 audits nothing; full prefill is never audited;
 * the warning is logged once; a live request waits for at most one audit piece.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { tinyKvEngines, type EngineOptions, type OpenedEngine } from "../helpers/tinyKvEngines.ts";
import type { Client } from "../server/serverKit.ts";
import { chatOverDocuments as chat, DOCS } from "../helpers/kvGenerationKit.ts";

setDefaultTimeout(120_000);

const engines = tinyKvEngines({ reuseScoring: "sync", reuseScoringBudget: 1, prefixCache: false });

// Without the automatic prefix cache: a prompt sent twice would otherwise find its own blocks there
// (exact prefix, no chunk reused), as bench-quality runs.
async function open(options: EngineOptions = {}): Promise<OpenedEngine & { logs: string[] }> {
  const logs: string[] = [];
  return { ...(await engines.open({ log: (line) => logs.push(line), ...options })), logs };
}

const REORDERED = [DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!];

async function reuseAudit(api: Client): Promise<any> {
  const stats = await api.get("/v1/stats");
  expect(stats.status).toBe(200);
  return stats.body.engine.reuse_audit;
}

function metricValue(text: string, sample: string): number {
  const line = text.split("\n").find((l) => l.startsWith(sample + " "));
  if (line === undefined) throw new Error(`no sample ${sample} in /metrics`);
  return Number(line.slice(sample.length + 1));
}

/** Sends a chat and waits until the engine's background work (the audit) is done. */
async function served(engine: GenerationEngine, api: Client, body: Record<string, unknown>): Promise<any> {
  const response = await api.post("/v1/chat/completions", body);
  expect(response.status).toBe(200);
  await engine.scheduler.background.idle();
  return response.body;
}

function chunksReused(body: any): number {
  return body.usage.ctxr.prompt_tokens_chunk_reused + body.usage.ctxr.prompt_tokens_recomputed;
}

describe("the live quality audit", () => {
  test("rate 1: a request served with reused chunks yields a sample in /v1/stats and /metrics; the storing request and full prefill do not", async () => {
    const { engine, api } = await open({ reuseAuditRate: 1, reuseAuditTokens: 6 });
    const samples: unknown[] = [];
    engine.scheduler.reuseAudit.onSample((s) => samples.push(s));
    const first = await served(engine, api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    expect(chunksReused(first)).toBe(0);
    expect((await reuseAudit(api)).audited).toBe(0);
    const full = await served(engine, api, chat(REORDERED, { ctxr: { policy: "full" } }));
    expect(full.usage.ctxr.policy ?? "full").toBe("full");
    expect((await reuseAudit(api)).audited).toBe(0);

    const blocksBefore = engine.scheduler.stats.kvBlocksUsed;
    const reused = await served(engine, api, chat(REORDERED, { ctxr: { policy: "none" } }));
    expect(chunksReused(reused)).toBeGreaterThan(0);
    // The audit's two scratch tables went back (none stores nothing: the chunks were all cached).
    expect(engine.scheduler.stats.kvBlocksUsed).toBe(blocksBefore);
    const audit = await reuseAudit(api);
    expect(audit).toMatchObject({ rate: 1, tokens: 6, warn_below: 0.9, audited: 1, pending: 0, dropped: 0, failed: 0 });
    expect(audit.cells).toHaveLength(1);
    const cell = audit.cells[0];
    expect(cell).toMatchObject({ model: engine.modelId, policy: "none", ratio: 0, count: 1 });
    expect(cell.kl_mean).toBeGreaterThanOrEqual(0);
    expect(Number.isFinite(cell.kl_mean)).toBe(true);
    expect(cell.kl_p50).toBe(cell.kl_mean);
    expect(samples).toHaveLength(1);
    expect(samples[0]).toMatchObject({ model: engine.modelId, policy: "none", ratio: 0, tokens: 6 });
    expect((samples[0] as any).agreement).toBe(cell.agreement_mean);

    const metrics = (await api.get("/metrics")).text;
    const labels = `model="${engine.modelId}",policy="none",ratio="0"`;
    expect(metricValue(metrics, `ctxr_reuse_audits_total{${labels}}`)).toBe(1);
    expect(metricValue(metrics, `ctxr_reuse_audit_kl_divergence_count{${labels}}`)).toBe(1);
    expect(metricValue(metrics, `ctxr_reuse_audit_token_agreement_count{${labels}}`)).toBe(1);
    expect(metricValue(metrics, `ctxr_reuse_audit_token_agreement_sum{${labels}}`)).toBe(cell.agreement_mean);
    expect(metricValue(metrics, `ctxr_reuse_audit_top1_agreements_total{${labels}}`)).toBe(cell.top1_share);
    expect(metricValue(metrics, "ctxr_reuse_audit_rate")).toBe(1);
    expect(metricValue(metrics, "ctxr_reuse_audit_dropped_total")).toBe(0);
    // Its pieces are background work of kind "audit": the full prefill in pieces of the prefill chunk (512), then 5 decodes.
    expect(metricValue(metrics, 'ctxr_background_jobs_run_total{kind="audit"}')).toBe(Math.ceil(reused.usage.prompt_tokens / 512) + 5);
  });

  test("cachecraft recomputing every reused token agrees with full prefill (KL ≈ 0), where none does not match it exactly", async () => {
    const { engine, api } = await open({ reuseAuditRate: 1 });
    await served(engine, api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    const exact = await served(engine, api, chat(REORDERED, { ctxr: { policy: "cachecraft", recompute_ratio: 1 } }));
    expect(chunksReused(exact)).toBeGreaterThan(0);
    await served(engine, api, chat(REORDERED, { ctxr: { policy: "none" } }));
    const cells = (await reuseAudit(api)).cells;
    const cachecraft = cells.find((c: any) => c.policy === "cachecraft");
    const none = cells.find((c: any) => c.policy === "none");
    expect(cachecraft).toMatchObject({ ratio: 1, count: 1, top1_share: 1, agreement_mean: 1 });
    expect(cachecraft.kl_mean).toBeLessThan(1e-4);
    // Stale KV moves the distribution by orders of magnitude more than rounding does.
    expect(none.kl_mean).toBeGreaterThan(100 * Math.max(cachecraft.kl_mean, 1e-7));
  });

  test("rate 0 (the default) audits nothing", async () => {
    const { engine, api } = await open();
    await served(engine, api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    const reused = await served(engine, api, chat(REORDERED, { ctxr: { policy: "none" } }));
    expect(chunksReused(reused)).toBeGreaterThan(0);
    expect(await reuseAudit(api)).toMatchObject({ rate: 0, audited: 0, pending: 0, dropped: 0, cells: [] });
    expect((await api.get("/metrics")).text).not.toContain('kind="audit"');
  });

  test("rate 0.5 audits every second eligible request", async () => {
    const { engine, api } = await open({ reuseAuditRate: 0.5, reuseAuditTokens: 2 });
    await served(engine, api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    const orders = [REORDERED, [DOCS[1]!, DOCS[3]!, DOCS[0]!, DOCS[2]!], [DOCS[3]!, DOCS[2]!, DOCS[1]!, DOCS[0]!], REORDERED];
    const audited: number[] = [];
    for (const order of orders) {
      await served(engine, api, chat(order, { ctxr: { policy: "none" } }));
      audited.push((await reuseAudit(api)).audited);
    }
    expect(audited).toEqual([0, 1, 1, 2]);
  });

  test("requests sampled while 2 audits are pending, or with background work off, are dropped and counted", async () => {
    const { engine, api } = await open({ reuseAuditRate: 1, reuseAuditTokens: 4 });
    await served(engine, api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    const orders = [REORDERED, [DOCS[1]!, DOCS[3]!, DOCS[0]!, DOCS[2]!], [DOCS[3]!, DOCS[2]!, DOCS[1]!, DOCS[0]!], [DOCS[2]!, DOCS[3]!, DOCS[0]!, DOCS[1]!], [DOCS[1]!, DOCS[0]!, DOCS[3]!, DOCS[2]!]];
    const bodies = await Promise.all(orders.map((order) => api.post("/v1/chat/completions", chat(order, { ctxr: { policy: "none" } }))));
    for (const body of bodies) expect(chunksReused(body.body)).toBeGreaterThan(0);
    await engine.scheduler.background.idle();
    const audit = await reuseAudit(api);
    // Every sampled request is either audited or dropped; never more than 2 wait at once.
    expect(audit.audited + audit.dropped).toBe(orders.length);
    expect(audit.audited).toBeGreaterThanOrEqual(2);
    expect(audit.pending).toBe(0);
    expect(metricValue((await api.get("/metrics")).text, "ctxr_reuse_audit_dropped_total")).toBe(audit.dropped);

    const off = await open({ reuseAuditRate: 1, reuseScoringBudget: 0 });
    await served(off.engine, off.api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    await served(off.engine, off.api, chat(REORDERED, { ctxr: { policy: "none" } }));
    expect(await reuseAudit(off.api)).toMatchObject({ audited: 0, dropped: 1, pending: 0 });
  });

  test("an audit pending when the runner dies is dropped or failed, never left pending, and the engine carries on", async () => {
    const { engine, api } = await open({ reuseAuditRate: 1, reuseAuditTokens: 60, prefillChunk: 8 });
    await served(engine, api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    expect((await api.post("/v1/chat/completions", chat(REORDERED, { ctxr: { policy: "none" } }))).status).toBe(200);
    expect(engine.scheduler.reuseAudit.stats.pending).toBe(1);
    process.kill(engine.runner.pid!, "SIGKILL");
    const deadline = performance.now() + 20_000;
    while (engine.scheduler.reuseAudit.stats.pending > 0 && performance.now() < deadline) await Bun.sleep(20);
    // The next request restarts the runner and is served.
    const after = await api.post("/v1/chat/completions", { messages: [{ role: "user", content: "Hello" }], max_tokens: 4, temperature: 0 });
    expect(after.status).toBe(200);
    await engine.scheduler.background.idle();
    const audit = await reuseAudit(api);
    expect(audit.pending).toBe(0);
    expect(audit.audited).toBe(0);
    expect(audit.dropped + audit.failed).toBe(1);
    expect(engine.scheduler.stats.runnerRestarts).toBeGreaterThanOrEqual(1);
  });

  test("the warning is logged once when a cell's agreement falls below --reuse-audit-warn-below", async () => {
    // Threshold 1: any disagreement falls below it (the tiny random model's stale KV changes its answer).
    const { engine, api, logs } = await open({ reuseAuditRate: 1, reuseAuditWarnBelow: 1, reuseAuditTokens: 4 });
    await served(engine, api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    const orders = [REORDERED, [DOCS[1]!, DOCS[3]!, DOCS[0]!, DOCS[2]!], [DOCS[3]!, DOCS[2]!, DOCS[1]!, DOCS[0]!], REORDERED];
    for (const order of orders) await served(engine, api, chat(order, { ctxr: { policy: "none" } }));
    const audit = await reuseAudit(api);
    expect(audit.audited).toBe(orders.length);
    expect(audit.cells[0].agreement_mean).toBeLessThan(1);
    const warnings = logs.filter((line) => line.includes("reuse audit") && line.includes("fell below"));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`model ${engine.modelId}, policy none, ratio 0`);
  });

  test("a live request arriving while an audit runs waits for at most one audit piece", async () => {
    // Small prefill pieces and many greedy tokens: an audit of many pieces.
    const { engine, api } = await open({ reuseAuditRate: 1, reuseAuditTokens: 60, prefillChunk: 8 });
    await served(engine, api, chat(DOCS, { ctxr: { policy: "prophet" } }));
    const response = await api.post("/v1/chat/completions", chat(REORDERED, { ctxr: { policy: "none" } }));
    expect(response.status).toBe(200);
    const background = engine.scheduler.background;
    const deadline = performance.now() + 10_000;
    while ((background.stats.kinds.audit?.run ?? 0) < 3 && performance.now() < deadline) await Bun.sleep(1);
    const before = background.stats.kinds.audit!.run;
    expect(engine.scheduler.reuseAudit.stats.pending).toBe(1);
    // Every FORWARD that starts while the live request is in flight: its own, and the audit's.
    const runner = engine.runner;
    const forward = runner.forward.bind(runner);
    let forwards = 0;
    runner.forward = (request) => (forwards++, forward(request));
    let live;
    try {
      live = await engine.scheduler.submit({ promptIds: [1, 2, 3, 4, 5, 6, 7, 8], maxTokens: 8, sampling: { temperature: 0, topP: 1, topK: 0 } }).result();
    } finally {
      runner.forward = forward;
    }
    const during = background.stats.kinds.audit!.run - before;
    expect(live.tokens.length).toBe(8);
    // The piece in flight when it came finished; no other started until the live request was done.
    expect(during).toBeLessThanOrEqual(1);
    // The live request's own: one prefill of its 8 tokens and 7 decodes; at most one more (a piece is one FORWARD).
    expect(forwards).toBeGreaterThanOrEqual(8);
    expect(forwards).toBeLessThanOrEqual(9);
    expect(engine.scheduler.reuseAudit.stats.pending).toBe(1);
    await background.idle();
    const audit = await reuseAudit(api);
    expect(audit).toMatchObject({ audited: 1, pending: 0, dropped: 0 });
    expect(audit.deferred).toBeGreaterThan(0);
  });
});
