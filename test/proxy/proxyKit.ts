/** Helpers for proxy tests: ctxr in process in front of fake upstreams, and streamed reads with timings. */
import type { ProxyOptions } from "../../src/proxy/contextProxy.ts";
import type { ServerOptions } from "../../src/server/serve.ts";
import { startTestServer, type TestServer } from "../server/serverKit.ts";
import type { FakeUpstream } from "./fakeUpstream.ts";
import { sleep } from "../../src/runtime/sleep.ts";

export interface ProxyServer extends TestServer {
  /** Everything ctxr logged. */
  logs: string[];
}

export async function startProxy(proxy: ProxyOptions, server: ServerOptions = {}, headers?: Record<string, string>): Promise<ProxyServer> {
  const logs: string[] = [];
  const started = await startTestServer({ server: { log: (text) => void logs.push(text), ...server, proxy }, headers });
  return Object.assign(started, { logs });
}

export interface StreamedAnswer {
  status: number;
  headers: Headers;
  /** Chunks as they arrived, with the time (performance.now()) of each. */
  chunks: { text: string; at: number }[];
  text: string;
}

/** POSTs JSON and reads the answer chunk by chunk. */
export async function streamPost(url: string, body: unknown, headers: Record<string, string> = {}): Promise<StreamedAnswer> {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const chunks: { text: string; at: number }[] = [];
  const decoder = new TextDecoder();
  const reader = response.body!.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push({ text: decoder.decode(value, { stream: true }), at: performance.now() });
  }
  return { status: response.status, headers: response.headers, chunks, text: chunks.map((c) => c.text).join("") };
}

/** The SSE data payloads of a stream's text. */
export function sseData(text: string): string[] {
  return text
    .split("\n\n")
    .filter((event) => event.startsWith("data: "))
    .map((event) => event.slice("data: ".length));
}

export const docs = (...names: string[]) => names.map((name) => ({ id: name, text: `${name} is a document about ${name}, with a few more words about ${name}.` }));

/** The document element the default template renders. */
export const rendered = (d: { id: string; text: string }) => `<document id="${d.id}">\n${d.text}\n</document>`;

export const PRIORITY = (labels: string) => `Please read the context in the following priority order: ${labels} and answer the question.`;

/** Between tests: the upstream answers normally again, nothing is being relayed, ctxr's state is reset. */
export async function settle(ctxr: ProxyServer, upstream: FakeUpstream): Promise<void> {
  upstream.recover();
  await waitFor(() => ctxr.server.inFlight === 0);
  const reset = await ctxr.post("/v1/reset");
  if (reset.status !== 200) throw new Error(`POST /v1/reset answered ${reset.status}`);
}

export async function waitFor(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await sleep(5);
  }
}
