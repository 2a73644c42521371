/** The audit's pure figures (src/engine/reuseAuditFigures.ts): the sampler, a cell's figures, the warning's crossings. */
import { describe, expect, test } from "bun:test";
import { AuditFigures, AuditSampler, RECENT_SAMPLES, alertLine, quantile } from "../../src/engine/reuseAuditFigures.ts";
import type { AgreementSample } from "../../src/quality/answerAgreement.ts";

function sample(agreement: number, kl = 0, extra: Partial<AgreementSample> = {}): AgreementSample {
  return { model: "m", policy: "none", ratio: 0, topOneAgrees: agreement === 1, klDivergence: kl, tokens: 8, agreedPrefix: Math.round(agreement * 8), agreement, ...extra };
}

describe("AuditSampler", () => {
  test("audits a share R of the eligible requests, deterministically", () => {
    const picks = (rate: number, n: number) => {
      const sampler = new AuditSampler(rate);
      const picked: number[] = [];
      for (let i = 0; i < n; i++) if (sampler.next()) picked.push(i);
      return picked;
    };
    expect(picks(1, 5)).toEqual([0, 1, 2, 3, 4]);
    expect(picks(0, 50)).toEqual([]);
    expect(picks(0.25, 12)).toEqual([3, 7, 11]);
    // 100 × 0.01 lands a hair below 1 in binary: the 100th request is still audited.
    expect(picks(0.01, 300)).toEqual([99, 199, 299]);
    expect(picks(0.1, 100).length).toBe(10);
  });

  test("refuses a rate outside 0..1", () => {
    for (const rate of [-0.1, 1.5, NaN]) expect(() => new AuditSampler(rate)).toThrow(RangeError);
  });
});

describe("AuditFigures", () => {
  test("a cell's count, top-1 share, KL mean and quantiles, mean agreement", () => {
    const figures = new AuditFigures(0);
    const kls = [0.5, 0.1, 0.2, 0.4, 0.3, 0.9, 0.8, 0.7, 0.6, 1.0];
    kls.forEach((kl, i) => figures.add(sample(i % 2 === 0 ? 1 : 0.5, kl)));
    figures.add(sample(1, 0, { policy: "cachecraft", ratio: 1 }));
    const [none, cachecraft] = figures.all;
    expect(none).toMatchObject({ model: "m", policy: "none", ratio: 0, count: 10, topOneShare: 0.5, klP50: 0.5, klP90: 0.9, agreementMean: 0.75 });
    expect(none!.klMean).toBeCloseTo(0.55, 12);
    expect(cachecraft).toMatchObject({ policy: "cachecraft", ratio: 1, count: 1, topOneShare: 1, klMean: 0, agreementMean: 1 });
    expect(quantile([], 0.5)).toBe(0);
  });

  test("the warning: once when the recent agreement falls below the threshold, once when it recovers", () => {
    const figures = new AuditFigures(0.9);
    const alerts = [];
    for (let i = 0; i < 5; i++) expect(figures.add(sample(1))).toBeNull();
    // Falling: (5 × 1 + 0) / 6 = 0.83 < 0.9.
    alerts.push(figures.add(sample(0)));
    for (let i = 0; i < 10; i++) alerts.push(figures.add(sample(0.5)));
    const fell = alerts.filter((a) => a !== null);
    expect(fell.length).toBe(1);
    expect(fell[0]).toMatchObject({ state: "below", samples: 6, cell: { model: "m", policy: "none", ratio: 0 } });
    expect(fell[0]!.recentAgreement).toBeCloseTo(5 / 6, 12);
    // Recovering takes the window filled with good samples again.
    const later = [];
    for (let i = 0; i < RECENT_SAMPLES; i++) later.push(figures.add(sample(1)));
    const recovered = later.filter((a) => a !== null);
    expect(recovered.length).toBe(1);
    expect(recovered[0]!.state).toBe("recovered");
    expect(alertLine(fell[0]!, 0.9)).toContain("fell below 0.9");
    expect(alertLine(recovered[0]!, 0.9)).toContain("back at or above 0.9");
    // Another cell has its own state.
    expect(figures.add(sample(0, 0, { policy: "prophet", ratio: 0.2 }))).toMatchObject({ state: "below" });
  });
});
