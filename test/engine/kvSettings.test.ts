import { describe, expect, test } from "bun:test";
import { describeKvSettings, describeKvTuning, type KvSettings } from "../../src/engine/kvSettings.ts";

const base: KvSettings = { policy: "prophet", recomputeRatio: 0.2, deviceBlocks: 256, hostBytes: 2 ** 30, disk: null, focusWindow: 0, trigger: {} };

describe("describeKvSettings (the information line)", () => {
  test("defaults: the policy and ratio and the tiers, in plain words, nothing that reads like a warning", () => {
    const line = describeKvSettings(base);
    expect(line).toBe("documents' KV caches are reused at any position (prophet, 20% recomputed); chunk cache: 256 device blocks, 1 GiB of host memory");
    expect(line).not.toMatch(/uncalibrated|nats|warning/);
  });

  test("a disk and a remote tier, and the policies that do not reuse at any position", () => {
    const line = describeKvSettings({ ...base, policy: "cachecraft", recomputeRatio: 0.15, hostBytes: 512 * 2 ** 20, disk: { dir: "/var/kv", bytes: 16 * 2 ** 30 }, remote: { url: "redis://r:6379", bytes: 4 * 2 ** 30 } });
    expect(line).toBe("documents' KV caches are reused at any position (cachecraft, 15% recomputed); chunk cache: 256 device blocks, 512 MiB of host memory, disk /var/kv (16 GiB), remote redis://r:6379 (4 GiB)");
    expect(describeKvSettings({ ...base, policy: "full" })).toStartWith("documents' KV caches are recomputed in full (--kv-policy full)");
    expect(describeKvSettings({ ...base, policy: "prefix" })).toStartWith("documents' KV caches are reused as a prefix only (--kv-policy prefix)");
  });
});

test("with --reuse-target-agreement: the starting ratio (clamped) and the range the target moves it in", () => {
  expect(describeKvSettings({ ...base, recomputeRatio: 0.02, reuseTarget: { target: 0.95, minRatio: 0.05, maxRatio: 0.6 } })).toStartWith(
    "documents' KV caches are reused at any position (prophet, 5% recomputed to start, then 5%–60% as set by the target agreement 0.95); chunk cache:",
  );
});

describe("describeKvTuning (the debug line)", () => {
  test("defaults: the knobs and the trigger's built-in thresholds, said to be built in", () => {
    expect(describeKvTuning(base)).toBe(
      "prophet span decay 0.8, prophet scores product; cachecraft scores shift, focused-chunk early stop off; " +
        "sparse-decode trigger: entropy 3 nats, varentropy 5 nats², window 16 steps (the built-in thresholds; ctxr model calibrate-sparse fits them to a model)",
    );
  });

  test("the attention scores, early stop and given thresholds are shown as set", () => {
    const line = describeKvTuning({
      ...base,
      focusWindow: 2,
      contextScores: "attention",
      prophetQueryRows: "last",
      prophetScores: "rank-sum",
      trigger: { entropyThreshold: 2.913, varentropyThreshold: 4.02, windowSteps: 8 },
    });
    expect(line).toContain("prophet span decay 0.8, last question token only, prophet scores rank-sum");
    expect(line).toContain("cachecraft scores attention, focused-chunk early stop after 2 stable layers");
    expect(line).toContain("entropy 2.913 nats, varentropy 4.02 nats², window 8 steps (as given)");
    expect(line).not.toContain("built-in");
  });

  test("the sparse-decode anchor, when given", () => {
    expect(describeKvTuning(base)).not.toContain("anchor");
    expect(describeKvTuning({ ...base, sparseAnchor: { kind: "newest", tokens: 1 } })).toEndWith("; sparse-decode anchor newest (1 token)");
    expect(describeKvTuning({ ...base, sparseAnchor: { kind: "newest-centered", tokens: 4 } })).toEndWith("; sparse-decode anchor newest-centered (4 tokens)");
    expect(describeKvTuning({ ...base, sparseAnchor: { kind: "window", tokens: 1 } })).toEndWith("; sparse-decode anchor window");
    expect(describeKvTuning({ ...base, sparseAnchor: { kind: "newest", tokens: 1, refinement: { factor: 4, lookback: 4 } } })).toEndWith(
      "; sparse-decode anchor newest (1 token), best 4 × budget re-ranked by best token, lookback 4",
    );
    expect(describeKvTuning({ ...base, sparseAnchor: { kind: "window", tokens: 1, refinement: { factor: 0, lookback: 4 } } })).toEndWith("; sparse-decode anchor window, ranked by mean key");
  });
});
