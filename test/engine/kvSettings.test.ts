import { describe, expect, test } from "bun:test";
import { describeKvSettings, type KvSettings } from "../../src/engine/kvSettings.ts";

const base: KvSettings = { policy: "prophet", recomputeRatio: 0.2, deviceBlocks: 256, hostBytes: 2 ** 30, disk: null, focusWindow: 0, trigger: {} };

describe("describeKvSettings", () => {
  test("defaults: the policy and ratio, the tiers, early stop off, and the trigger flagged as uncalibrated", () => {
    expect(describeKvSettings(base)).toBe(
      "KV reuse policy prophet at 20% recompute (prophet span decay 0.8); chunk cache: 256 device blocks, host 1 GiB, disk none; cachecraft scores shift, focused-chunk early stop off; " +
        "sparse-decode trigger: entropy 3 nats, varentropy 5 nats², window 16 steps (uncalibrated defaults: see ctxr model calibrate-sparse)",
    );
  });

  test("a disk tier, the attention scores, early stop and calibrated thresholds are shown as set", () => {
    const line = describeKvSettings({
      ...base,
      policy: "cachecraft",
      recomputeRatio: 0.15,
      hostBytes: 512 * 2 ** 20,
      disk: { dir: "/var/kv", bytes: 16 * 2 ** 30 },
      focusWindow: 2,
      contextScores: "attention",
      trigger: { entropyThreshold: 2.913, varentropyThreshold: 4.02, windowSteps: 8 },
    });
    expect(line).toContain("KV reuse policy cachecraft at 15% recompute");
    expect(line).toContain("host 512 MiB, disk /var/kv (16 GiB)");
    expect(line).toContain("cachecraft scores attention, focused-chunk early stop after 2 stable layers");
    expect(line).toContain("entropy 2.913 nats, varentropy 4.02 nats², window 8 steps");
    expect(line).not.toContain("uncalibrated");
  });
});
