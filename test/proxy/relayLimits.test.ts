import { afterEach, describe, expect, test } from "bun:test";
import { relayBody } from "../../src/proxy/forwarder.ts";
import { startProxy, waitFor, type ProxyServer } from "./proxyKit.ts";
import { sleep } from "../../src/runtime/sleep.ts";
import { serveForTest } from "../helpers/httpServe.ts";

/** An upstream whose streamed answers send one chunk, then wait until `release()`. */
function holdingUpstream() {
  const waiting: (() => void)[] = [];
  const server = serveForTest(() => {
    let close: () => void = () => {};
    const released = new Promise<void>((resolve) => (close = resolve));
    waiting.push(close);
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(new TextEncoder().encode('data: {"choices":[]}\n\n'));
        await released;
        controller.enqueue(new TextEncoder().encode("data: [DONE]\n\n"));
        controller.close();
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    get waiting() {
      return waiting.length;
    },
    releaseAll: () => waiting.splice(0).forEach((release) => release()),
    stop: () => server.stop(true),
  };
}

const cleanup: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

describe("--max-upstream-requests", () => {
  test("beyond the limit a request gets 429 with Retry-After and changes nothing; below it again, requests go through", async () => {
    const upstream = holdingUpstream();
    cleanup.push(() => upstream.stop());
    const proxy: ProxyServer = await startProxy({ upstreams: [upstream.url], maxUpstreamRequests: 2 });
    cleanup.push(() => proxy.close());
    const chat = (id: string) => ({ model: "m", stream: true, messages: [{ role: "user", content: `<document>${id} text</document> question ${id}` }] });
    const open = [0, 1].map((i) => fetch(`${proxy.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat(`d${i}`)) }));
    await waitFor(() => upstream.waiting === 2);
    const contextsBefore = (await proxy.get("/v1/stats")).body.contexts;

    const refused = await proxy.post("/v1/chat/completions", chat("d2"));
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.body.error.message).toContain("--max-upstream-requests 2");
    const passthrough = await proxy.get("/v1/models");
    expect(passthrough.status).toBe(429);
    const stats = (await proxy.get("/v1/stats")).body;
    expect(stats.contexts).toBe(contextsBefore);
    expect(stats.proxy.relaying).toBe(2);
    expect(stats.proxy.refused_busy).toBe(2);
    expect((await proxy.get("/metrics")).text).toContain("ctxr_proxy_refused_busy_total 2\n");

    upstream.releaseAll();
    for (const response of await Promise.all(open)) expect(await response.text()).toContain("[DONE]");
    await waitFor(() => proxy.service !== null && upstream.waiting === 0);
    const next = fetch(`${proxy.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat("d3")) });
    await waitFor(() => upstream.waiting === 1);
    upstream.releaseAll();
    expect((await next).status).toBe(200);
  });
});

describe("a client that stops reading", () => {
  test("is cut off after the stall time and the upstream answer is cancelled", async () => {
    let cancelled: unknown = null;
    let sent = 0;
    const source = new ReadableStream<Uint8Array>({
      pull(controller) {
        controller.enqueue(new Uint8Array(1024).fill(65));
        sent++;
      },
      cancel(reason) {
        cancelled = reason;
      },
    });
    let outcome: { error: unknown } | null = null;
    const relayed = relayBody(source, { scan: null, secrets: [], stallMs: 100, onDone: (done) => (outcome = done) })!;
    const reader = relayed.getReader();
    expect((await reader.read()).value!.length).toBe(1024);
    // Reads nothing more.
    await sleep(300);
    expect(outcome).not.toBeNull();
    expect(String((outcome as unknown as { error: unknown }).error)).toContain("read nothing for 0.1 s");
    expect(String(cancelled)).toContain("read nothing");
    expect(sent).toBeLessThan(5);
    await expect(reader.read()).rejects.toThrow("read nothing");
  });

  test("a client that keeps reading, however slowly, is not cut off", async () => {
    let chunks = 0;
    const source = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (chunks++ === 5) controller.close();
        else controller.enqueue(new Uint8Array(10));
      },
    });
    let outcome: { error: unknown } | null = null;
    const reader = relayBody(source, { scan: null, secrets: [], stallMs: 100, onDone: (done) => (outcome = done) })!.getReader();
    let received = 0;
    for (;;) {
      await sleep(60);
      const { done, value } = await reader.read();
      if (done) break;
      received += value!.length;
    }
    expect(received).toBe(50);
    expect((outcome as unknown as { error: unknown }).error).toBeNull();
  });
});

describe("a client that never reads, through a real server", () => {
  test("its answer is cut off after --client-stall-seconds and the upstream's stream is cancelled", async () => {
    let upstreamCancelled = false;
    let chunksSent = 0;
    const chunk = new Uint8Array(16 * 1024).fill(97);
    const upstream = serveForTest(
      () =>
        new Response(
          new ReadableStream<Uint8Array>({
            pull(controller) {
              if (chunksSent++ > 4096) controller.close();
              else controller.enqueue(chunk);
            },
            cancel() {
              upstreamCancelled = true;
            },
          }),
          { headers: { "content-type": "text/event-stream" } },
        ),
    );
    cleanup.push(() => upstream.stop(true));
    const proxy = await startProxy({ upstreams: [`http://127.0.0.1:${upstream.port}`], clientStallMs: 300 });
    cleanup.push(() => proxy.close());
    const { connect } = await import("node:net");
    const port = Number(new URL(proxy.url).port);
    const body = JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] });
    const socket = connect(port, "127.0.0.1");
    socket.on("error", () => {});
    cleanup.push(() => socket.destroy());
    await new Promise<void>((resolve) => socket.on("connect", () => resolve()));
    socket.pause();
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    await waitFor(() => upstreamCancelled, 10_000);
    // 64 MB were offered; far less went out before the client was cut off.
    expect(chunksSent).toBeLessThan(2048);
    await waitFor(() => proxy.logs.join("").includes("read nothing for 0.3 s"), 5_000);
    expect((await proxy.get("/v1/stats")).body.upstreams[0].in_flight).toBe(0);
  }, 30_000);
});
