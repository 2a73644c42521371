/**
 * The proxy's added time to first byte (scripts/bench-proxy.ts, scripts/bench-routing.ts):
 * streaming chat requests with 15 documents in the `documents` field through ctxr, against the
 * same prompt pre-rendered sent straight to an engine. The two kinds alternate request by
 * request (which goes first alternates too), so drift hits both alike. TTFB = from sending the
 * request to receiving the first body chunk.
 */
import { renderDocumentsField } from "../src/chat/documentsField.ts";
import { mulberry32 } from "../src/quality/qualityRandom.ts";
import { percentile } from "./benchKit.ts";
import { documentText } from "./benchProxyUpstream.ts";

export const DOCS_PER_REQUEST = 15;
const DOC_POOL = 300;

/** Uniform numbers in [0, 1) from a seed (mulberry32). */
export function seeded(seed: number): () => number {
  const next = mulberry32(seed);
  return () => next() / 4294967296;
}

/** Request i: 15 documents of `docChars` characters (default ~1,000 tokens of words) drawn from 300. */
export function ttfbBodies(i: number, docChars = 4000): { proxied: string; direct: string } {
  const random = seeded(1000 + i);
  const ids = new Set<number>();
  while (ids.size < DOCS_PER_REQUEST) ids.add(Math.floor(random() * DOC_POOL));
  const documents = [...ids].map((id) => ({ id: String(id), text: documentText(id, docChars) }));
  const question = `Question ${i}: what do these documents have in common?`;
  const common = { model: "fake-model", stream: true, max_tokens: 16 };
  return {
    proxied: JSON.stringify({ ...common, messages: [{ role: "user", content: question }], documents }),
    direct: JSON.stringify({ ...common, messages: [{ role: "user", content: `${renderDocumentsField(documents)}\n\n${question}` }] }),
  };
}

export async function timeToFirstByte(url: string, body: string): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const reader = response.body!.getReader();
  const first = await reader.read();
  const elapsed = performance.now() - started;
  if (response.status !== 200 || first.done) throw new Error(`status ${response.status}`);
  while (!(await reader.read()).done);
  return elapsed;
}

export interface TtfbRow {
  connections: number;
  requests: number;
  direct: { p50: number; p99: number };
  proxied: { p50: number; p99: number };
  added: { p50: number; p99: number };
}

/**
 * `total` requests of each kind (after a warm-up of up to 40) over `connections` connections;
 * `direct`: the engine's URL, or several taken in turn.
 */
export async function ttfbRun(direct: string | readonly string[], ctxr: string, connections: number, total: number, offset: number, docChars?: number): Promise<TtfbRow> {
  const engines = typeof direct === "string" ? [direct] : direct;
  const times = { direct: [] as number[], proxied: [] as number[] };
  const warmup = Math.min(40, Math.floor(total / 5));
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= total + warmup) return;
      const bodies = ttfbBodies(offset + i, docChars);
      // Alternate which goes first, so neither always follows the other.
      const order = i % 2 === 0 ? (["direct", "proxied"] as const) : (["proxied", "direct"] as const);
      for (const kind of order) {
        const t = await timeToFirstByte(kind === "direct" ? engines[i % engines.length]! : ctxr, bodies[kind]);
        if (i >= warmup) times[kind].push(t);
      }
    }
  };
  await Promise.all(Array.from({ length: connections }, worker));
  const d = { p50: percentile(times.direct, 0.5), p99: percentile(times.direct, 0.99) };
  const p = { p50: percentile(times.proxied, 0.5), p99: percentile(times.proxied, 0.99) };
  return { connections, requests: times.direct.length, direct: d, proxied: p, added: { p50: p.p50 - d.p50, p99: p.p99 - d.p99 } };
}

export interface TtfbAbRow {
  connections: number;
  requests: number;
  direct: { p50: number };
  /** Through this checkout's ctxr and through the baseline's, each on the same engine. */
  proxied: { p50: number };
  baseline: { p50: number };
  /** Median over requests of (through ctxr − direct), the same request body, back to back. */
  added: { p50: number };
  baselineAdded: { p50: number };
}

/**
 * The added TTFB of two ctxr servers (this checkout and a baseline) in front of the same engine:
 * each request goes straight to the engine, through one ctxr and through the other, one after
 * another in a rotating order, so that drift on a shared machine hits all three alike. The added
 * time is taken request by request (through − direct for the same body), then its median.
 */
export async function ttfbAbRun(direct: string, ctxr: string, baseline: string, connections: number, total: number, offset: number): Promise<TtfbAbRow> {
  const times = { direct: [] as number[], proxied: [] as number[], baseline: [] as number[] };
  const added = { proxied: [] as number[], baseline: [] as number[] };
  const warmup = Math.min(40, Math.floor(total / 5));
  const rotations = [
    ["direct", "proxied", "baseline"],
    ["proxied", "baseline", "direct"],
    ["baseline", "direct", "proxied"],
    ["direct", "baseline", "proxied"],
    ["baseline", "proxied", "direct"],
    ["proxied", "direct", "baseline"],
  ] as const;
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= total + warmup) return;
      const bodies = ttfbBodies(offset + i);
      const t: Record<string, number> = {};
      for (const kind of rotations[i % rotations.length]!) {
        t[kind] = await timeToFirstByte(kind === "direct" ? direct : kind === "proxied" ? ctxr : baseline, kind === "direct" ? bodies.direct : bodies.proxied);
      }
      if (i < warmup) continue;
      times.direct.push(t.direct!);
      times.proxied.push(t.proxied!);
      times.baseline.push(t.baseline!);
      added.proxied.push(t.proxied! - t.direct!);
      added.baseline.push(t.baseline! - t.direct!);
    }
  };
  await Promise.all(Array.from({ length: connections }, worker));
  const p50 = (values: number[]) => ({ p50: percentile(values, 0.5) });
  return {
    connections,
    requests: times.direct.length,
    direct: p50(times.direct),
    proxied: p50(times.proxied),
    baseline: p50(times.baseline),
    added: p50(added.proxied),
    baselineAdded: p50(added.baseline),
  };
}
