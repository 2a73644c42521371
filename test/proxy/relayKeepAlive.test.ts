/**
 * Relayed streams that pause (issue 26): ctxr in front of an upstream that stalls 30 s before its
 * first token (after its role chunk, which carries the headers), one that stalls 30 s between two
 * chunks, and one that sends nothing at all, not even headers, for 30 s,
 * all with ctxr's defaults (Bun's 10 s idle timeout, the default keep-alive interval). The clients
 * get every chunk and [DONE] (the openai SDK too, which ignores the keep-alive comments); an
 * upstream answer that breaks off mid-stream ends the client's stream with an error event and
 * [DONE], and is logged.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { startFakeUpstream, type FakeUpstream, type RecordedRequest } from "./fakeUpstream.ts";
import { sseData, startProxy, streamPost, type ProxyServer } from "./proxyKit.ts";
import { sleep } from "../../src/runtime/sleep.ts";
import { runtimeName } from "../../src/runtime/runtimeName.ts";

const STALL_MS = 30_000;
const BUN_IDLE_TIMEOUT_MS = 10_000;
const SLOW_GET_MS = 14_000;

let upstream: FakeUpstream;
let ctxr: ProxyServer;

const encoder = new TextEncoder();
const chunk = (content: string, finish: string | null = null, role?: "assistant") =>
  `data: ${JSON.stringify({ id: "chatcmpl-stall", object: "chat.completion.chunk", created: 1, model: "fake-model", choices: [{ index: 0, delta: { ...(role ? { role } : {}), content }, logprobs: null, finish_reason: finish }] })}\n\n`;
/** The first chunk an engine sends (Bun.serve sends the headers with it, as vLLM sends its headers at once). */
const ROLE = chunk("", null, "assistant");

/** An SSE answer: each step either writes its text or waits its milliseconds; `breakOff` errors the body at the end instead of closing it. */
function scripted(steps: (string | number)[], breakOff = false): Response {
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      for (const step of steps) {
        if (typeof step === "number") await sleep(step);
        else controller.enqueue(encoder.encode(step));
      }
      if (breakOff) controller.error(new Error("engine died"));
      else controller.close();
    },
  });
  return new Response(stream, { headers: { "content-type": "text/event-stream" } });
}

function respond(record: RecordedRequest): Response | Promise<Response> | undefined {
  // A request without a body (nothing for Bun to read) whose answer takes longer than the idle timeout.
  if (record.method === "GET" && record.path === "/v1/models") return sleep(SLOW_GET_MS).then(() => Response.json({ object: "list", data: [{ id: "fake-model", object: "model" }] }));
  const mode = String(record.json?.messages?.at(-1)?.content ?? "");
  if (mode.includes("stall-first")) return scripted([ROLE, STALL_MS, chunk("one "), chunk("two", "stop"), "data: [DONE]\n\n"]);
  if (mode.includes("stall-between")) return scripted([ROLE, chunk("one "), STALL_MS, chunk("two", "stop"), "data: [DONE]\n\n"]);
  if (mode.includes("late-headers")) return sleep(STALL_MS).then(() => scripted([ROLE, chunk("one "), chunk("two", "stop"), "data: [DONE]\n\n"]));
  // Breaks off in the middle of an event's line.
  if (mode.includes("break-off")) return scripted([chunk("one "), 50, 'data: {"id":"chatcmpl-stall","obj'], true);
  return undefined;
}

beforeAll(async () => {
  upstream = await startFakeUpstream();
  upstream.custom(respond);
  ctxr = await startProxy({ upstreams: [upstream.url] });
});

afterAll(async () => {
  await ctxr?.close();
  await upstream?.stop();
});

const body = (mode: string) => ({ model: "fake-model", stream: true, messages: [{ role: "user", content: `mode: ${mode}` }] });
const contentOf = (text: string) =>
  sseData(text)
    .filter((data) => data !== "[DONE]")
    .map((data) => JSON.parse(data).choices[0].delta.content)
    .join("");

test(`upstreams that pause ${STALL_MS / 1000} s (before the first token, between chunks, before the headers): every chunk and [DONE] reach the client`, async () => {
  const url = `${ctxr.url}/v1/chat/completions`;
  const sdk = new OpenAI({ baseURL: `${ctxr.url}/v1`, apiKey: "none", timeout: 120_000, maxRetries: 0 });
  const sdkRead = (async () => {
    const started = performance.now();
    let text = "";
    for await (const part of await sdk.chat.completions.create({ model: "fake-model", stream: true, messages: [{ role: "user", content: "mode: stall-between (sdk)" }] })) text += part.choices[0]?.delta.content ?? "";
    return { text, ms: performance.now() - started };
  })();
  const started = performance.now();
  const [first, between, lateHeaders, viaSdk] = await Promise.all([streamPost(url, body("stall-first")), streamPost(url, body("stall-between")), streamPost(url, body("late-headers")), sdkRead]);

  for (const answer of [first, between, lateHeaders]) {
    expect(answer.status).toBe(200);
    expect(contentOf(answer.text)).toBe("one two");
    expect(sseData(answer.text).at(-1)).toBe("[DONE]");
    // The pause really outlasted Bun's idle timeout.
    expect(answer.chunks.at(-1)!.at - started).toBeGreaterThan(STALL_MS);
  }
  for (const answer of [first, between]) expect(answer.chunks.at(-1)!.at - answer.chunks[0]!.at).toBeGreaterThan(BUN_IDLE_TIMEOUT_MS);
  // While the upstream was silent, ctxr kept the client's connection busy with comments.
  expect(first.text).toContain(": keep-alive\n\n");
  expect(between.text).toContain(": keep-alive\n\n");
  expect(viaSdk.text).toBe("one two");
  expect(viaSdk.ms).toBeGreaterThan(STALL_MS);
  expect(ctxr.logs.join("")).not.toContain("broke off");
}, 120_000);

test("an upstream stream that breaks off mid-event ends with an error event and [DONE], and is logged", async () => {
  const answer = await streamPost(`${ctxr.url}/v1/chat/completions`, body("break-off"));
  expect(answer.status).toBe(200);
  const events = sseData(answer.text);
  expect(events.at(-1)).toBe("[DONE]");
  const error = JSON.parse(events.at(-2)!);
  expect(error.error.message).toContain("broke off");
  expect(error.error.type).toBe("server_error");
  expect(error.error.code).toBe("upstream_unavailable");
  // The complete chunk before the break came through untouched.
  expect(JSON.parse(events[0]!).choices[0].delta.content).toBe("one ");
  expect(ctxr.logs.join("")).toContain("answer broke off");
});

// The idle timeout is Bun.serve's (Deno.serve has none).
test.skipIf(runtimeName !== "bun")("a relayed request without a body whose upstream answers after the idle timeout gets its answer; the connection still idles out after it", async () => {
  const started = performance.now();
  const answer = await fetch(`${ctxr.url}/v1/models`);
  expect(answer.status).toBe(200);
  expect(((await answer.json()) as { data: { id: string }[] }).data[0]!.id).toBe("fake-model");
  expect(performance.now() - started).toBeGreaterThan(SLOW_GET_MS);

  // Held off only while the upstream was awaited: an idle keep-alive connection is closed again.
  const { connect } = await import("node:net");
  const port = Number(new URL(ctxr.url).port);
  const closedAfter = await new Promise<number>((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    let answeredAt = 0;
    socket.on("data", (data) => {
      if (answeredAt === 0 && data.toString().includes("fake-model")) answeredAt = performance.now();
    });
    socket.on("close", () => (answeredAt === 0 ? reject(new Error("closed before the answer")) : resolve(performance.now() - answeredAt)));
    socket.write(`GET /v1/models HTTP/1.1\r\nHost: ${new URL(ctxr.url).host}\r\n\r\n`);
    setTimeout(() => socket.destroy(), 40_000);
  });
  expect(closedAfter).toBeGreaterThan(BUN_IDLE_TIMEOUT_MS - 2_000);
  expect(closedAfter).toBeLessThan(BUN_IDLE_TIMEOUT_MS + 8_000);
}, 120_000);
