/**
 * Prometheus text of the live quality audit (reuseAudit.ts): histograms of each sample's KL
 * divergence and token agreement by model, policy and ratio (fed by the audit's onSample), and
 * its counters and gauges.
 */
import { LabeledHistogram, metricFamily, singleMetric, type Labels } from "../http/prometheus.ts";
import type { AgreementSample } from "../quality/answerAgreement.ts";
import type { BackgroundWorkStats } from "./backgroundWork.ts";
import { AUDIT_JOB, type ReuseAudit, type ReuseAuditStats } from "./reuseAudit.ts";

/** KL(full ‖ reused) in nats: from "the same distribution" to "a different answer". */
export const KL_BUCKETS = [0.001, 0.01, 0.03, 0.1, 0.3, 1, 3, 10];
/** Greedy-token agreement (the common prefix share). */
export const AGREEMENT_BUCKETS = [0, 0.25, 0.5, 0.75, 0.9, 0.99, 1];

function cellLabels(cell: { model: string; policy: string; ratio: number }): Labels {
  return { model: cell.model, policy: cell.policy, ratio: String(cell.ratio) };
}

export class ReuseAuditMetrics {
  private readonly kl = new LabeledHistogram("ctxr_reuse_audit_kl_divergence", "Audited requests' first-token KL(full prefill || reused KV), nats.", KL_BUCKETS);
  private readonly agreement = new LabeledHistogram(
    "ctxr_reuse_audit_token_agreement",
    "Audited requests' greedy-token agreement with full prefill (common prefix share of --reuse-audit-tokens tokens).",
    AGREEMENT_BUCKETS,
  );

  constructor(audit: ReuseAudit) {
    audit.onSample((sample) => this.observe(sample));
  }

  private observe(sample: AgreementSample): void {
    const labels = cellLabels(sample);
    this.kl.observe(labels, sample.klDivergence);
    this.agreement.observe(labels, sample.agreement);
  }

  render(stats: ReuseAuditStats, background: BackgroundWorkStats): string {
    const cells = stats.cells;
    let out = singleMetric("ctxr_reuse_audit_rate", "gauge", "Share of requests served with reused chunks that the audit compares with full prefill (--reuse-audit-rate; 0: off).", stats.rate);
    out += this.kl.render();
    out += this.agreement.render();
    out += metricFamily("ctxr_reuse_audits_total", "counter", "Audits run to the end, by model, policy and ratio.", cells.map((c) => ({ labels: cellLabels(c), value: c.count })));
    out += metricFamily(
      "ctxr_reuse_audit_top1_agreements_total",
      "counter",
      "Audits whose reused first token (top-1) was full prefill's.",
      cells.map((c) => ({ labels: cellLabels(c), value: Math.round(c.topOneShare * c.count) })),
    );
    out += singleMetric("ctxr_reuse_audit_pending", "gauge", "Audits captured and not finished.", stats.pending);
    out += singleMetric("ctxr_reuse_audit_dropped_total", "counter", "Sampled requests not audited: no blocks for the snapshot or the full side, too many pending, background work off, a runner restart.", stats.dropped);
    out += singleMetric("ctxr_reuse_audit_failed_total", "counter", "Audits that failed (logged).", stats.failed);
    out += singleMetric(
      "ctxr_reuse_audit_deferred_total",
      "counter",
      "Audit pieces that waited at least once for live requests or the budget.",
      background.kinds[AUDIT_JOB]?.deferred ?? 0,
    );
    return out;
  }
}
