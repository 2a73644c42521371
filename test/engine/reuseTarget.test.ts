/**
 * --reuse-target-agreement (src/engine/reuseTarget.ts) through a real server on an ephemeral port
 * with the real CPU runner and the tiny model: a request that names no ratio gets its policy's
 * current one, the controller's samples move it, a request's own ratio wins, and /v1/stats,
 * /metrics and usage.ctxr show it. The audit is not wired here: samples go to the controller
 * directly, as the audit's onSample listener will hand them.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { tinyKvEngines } from "../helpers/tinyKvEngines.ts";
import { chatOverDocuments as chat, DOCS } from "../helpers/kvGenerationKit.ts";

setDefaultTimeout(120_000);

const engines = tinyKvEngines({ servedModelName: "tiny-kv" });
const open = engines.open;

const TARGET = { target: 0.9, minRatio: 0.05, maxRatio: 0.6, auditRate: 0.05 };
/** The documents again in another order: every chunk is reused away from where it was stored. */
const REORDERED = [DOCS[2]!, DOCS[0]!, DOCS[3]!, DOCS[1]!];

describe("--reuse-target-agreement", () => {
  test("a request without a ratio gets its policy's current one, which the samples move; a request's own ratio wins", async () => {
    const { engine, api } = await open({ reuseTarget: TARGET, recomputeRatio: 0.2 });
    const first = await api.post("/v1/chat/completions", chat(DOCS));
    expect(first.status).toBe(200);
    expect(first.body.usage.ctxr).toMatchObject({ policy: "prophet", recompute_ratio: 0.2 });

    // Agreement collapsed at 0.2: the prophet cell rises at once; cachecraft's stays.
    engine.reuseTarget!.observe({ model: "tiny-kv", policy: "prophet", ratio: 0.2, agreement: 0 });
    const raised = engine.reuseTarget!.ratioFor("prophet")!;
    // One sample agreeing on nothing: the window's mean with its prior is 0.8625, up by that shortfall's share of 0.1.
    expect(raised).toBeCloseTo(0.2375, 9);
    expect(engine.reuseTarget!.ratioFor("cachecraft")).toBe(0.2);
    // Another model's samples are not this engine's.
    engine.reuseTarget!.observe({ model: "other", policy: "prophet", ratio: 0.3, agreement: 0 });
    expect(engine.reuseTarget!.ratioFor("prophet")).toBe(raised);

    const low = await api.post("/v1/chat/completions", chat(REORDERED, { ctxr: { recompute_ratio: 0.05 } }));
    const adaptive = await api.post("/v1/chat/completions", chat(REORDERED));
    expect(low.body.usage.ctxr.recompute_ratio).toBe(0.05);
    expect(adaptive.body.usage.ctxr.recompute_ratio).toBe(raised);
    // The raised ratio recomputes more of the same reused chunks than the request's own 0.05.
    expect(adaptive.body.usage.ctxr.prompt_tokens_recomputed).toBeGreaterThan(low.body.usage.ctxr.prompt_tokens_recomputed);
    const cachecraft = await api.post("/v1/chat/completions", chat(REORDERED, { ctxr: { policy: "cachecraft" } }));
    expect(cachecraft.body.usage.ctxr).toMatchObject({ policy: "cachecraft", recompute_ratio: 0.2 });
    // A policy that takes no ratio reports none.
    const none = await api.post("/v1/chat/completions", chat(REORDERED, { ctxr: { policy: "none" } }));
    expect(none.body.usage.ctxr.recompute_ratio).toBeUndefined();

    const stats = await api.get("/v1/stats");
    expect(stats.status).toBe(200);
    const target = stats.body.engine.reuse_target;
    expect(target).toMatchObject({ target: 0.9, min_ratio: 0.05, max_ratio: 0.6, audit_rate: 0.05 });
    const prophet = target.cells.find((cell: any) => cell.policy === "prophet");
    expect(prophet).toMatchObject({ model: "tiny-kv", ratio: raised, samples: 1, counted: 1, moves_up: 1, moves_down: 0, window_agreement: null });
    expect(target.cells.map((cell: any) => cell.policy).sort()).toEqual(["cachecraft", "epic", "prophet"]);

    const metrics = (await api.get("/metrics")).text;
    expect(metrics).toContain("ctxr_reuse_target_agreement 0.9\n");
    expect(metrics).toContain(`ctxr_reuse_target_ratio{model="tiny-kv",policy="prophet"} ${raised}\n`);
    expect(metrics).toContain(`ctxr_reuse_target_ratio{model="tiny-kv",policy="cachecraft"} 0.2\n`);
    expect(metrics).toContain(`ctxr_reuse_target_moves_up_total{model="tiny-kv",policy="prophet"} 1\n`);
  });

  test("the initial ratio is --recompute-ratio clamped into [--min-ratio, --max-ratio]; without a target nothing changes", async () => {
    const { engine } = await open({ reuseTarget: { ...TARGET, minRatio: 0.3 }, recomputeRatio: 0.2 });
    expect(engine.reuseTarget!.ratioFor("prophet")).toBe(0.3);
    const plain = await open({ recomputeRatio: 0.15 });
    expect(plain.engine.reuseTarget).toBeNull();
    const answer = await plain.api.post("/v1/chat/completions", chat(DOCS));
    expect(answer.body.usage.ctxr.recompute_ratio).toBe(0.15);
    expect((await plain.api.get("/v1/stats")).body.engine.reuse_target).toBeUndefined();
    expect((await plain.api.get("/metrics")).text).not.toContain("ctxr_reuse_target");
  });
});
