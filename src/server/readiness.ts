/**
 * Whether the server can serve requests now (GET /ready), as opposed to whether it is alive
 * (/health, /healthz): a proxy is ready while one of its upstreams can serve, a model server
 * while its runner runs, and every server while its journal can write.
 */
import { engineLabel } from "../proxy/engineDetection.ts";
import type { Upstream } from "../proxy/upstreamPool.ts";

export interface UpstreamReadiness {
  url: string;
  serving: boolean;
  engine: string;
  detected: string | null;
  reason: string | null;
}

export interface Readiness {
  ready: boolean;
  reason: string | null;
  upstreams?: UpstreamReadiness[];
}

export interface ReadinessInputs {
  /** Why the journal cannot write, or null. */
  journalFailure: string | null;
  /** With --model: whether its runner runs (null without a model). */
  runnerAlive: boolean | null;
  /** With --upstream: the upstreams (null without). */
  upstreams: readonly Upstream[] | null;
}

export function readiness(inputs: ReadinessInputs): Readiness {
  const upstreams = inputs.upstreams?.map(upstreamReadiness);
  const withUpstreams = upstreams === undefined ? {} : { upstreams };
  if (inputs.journalFailure !== null) return { ready: false, reason: inputs.journalFailure, ...withUpstreams };
  if (inputs.runnerAlive === false) return { ready: false, reason: "the model runner is not running (it is restarted after a crash, or the server is stopping)" };
  if (upstreams !== undefined && !upstreams.some((upstream) => upstream.serving)) {
    const each = upstreams.map((upstream) => `${upstream.url}: ${upstream.reason ?? "not serving"}`).join("; ");
    return { ready: false, reason: `no upstream can serve (${each})`, ...withUpstreams };
  }
  return { ready: true, reason: null, ...withUpstreams };
}

function upstreamReadiness(upstream: Upstream): UpstreamReadiness {
  const probed = upstream.probe;
  const serving = upstream.healthy && (probed === null || probed.serving);
  const reason = probed !== null && !probed.serving ? probed.reason : !upstream.healthy ? `out of rotation after a failure (${upstream.lastError ?? "unknown"})` : null;
  return { url: upstream.url, serving, engine: upstream.engine, detected: upstream.detected === null ? null : engineLabel(upstream.detected), reason };
}
