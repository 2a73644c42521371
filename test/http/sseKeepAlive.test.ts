/**
 * SSE keep-alive comments (src/http/sseKeepAlive.ts): where in a byte stream a comment may go,
 * what closes an open event, the idle ticker, and that the official openai SDK reads a stream
 * with comments at every allowed place exactly as it reads the same stream without them.
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { IdleTicker, KEEP_ALIVE_EVENT, KEEP_ALIVE_LINE, SseBoundary } from "../../src/http/sseKeepAlive.ts";

const bytes = (text: string) => new TextEncoder().encode(text);
const boundaryAfter = (...pieces: string[]) => {
  const boundary = new SseBoundary();
  for (const piece of pieces) boundary.observe(bytes(piece));
  return boundary;
};

describe("SseBoundary", () => {
  test("a whole comment event at the start and between events", () => {
    expect(boundaryAfter().keepAlive()).toBe(KEEP_ALIVE_EVENT);
    expect(boundaryAfter("data: 1\n\n").keepAlive()).toBe(KEEP_ALIVE_EVENT);
    // The blank line split over two chunks, and a one-byte chunk.
    expect(boundaryAfter("data: 1\n", "\n").keepAlive()).toBe(KEEP_ALIVE_EVENT);
    expect(boundaryAfter("data: 1", "\n", "\n").keepAlive()).toBe(KEEP_ALIVE_EVENT);
    expect(boundaryAfter("").keepAlive()).toBe(KEEP_ALIVE_EVENT);
  });

  test("a comment line inside an event, nothing mid-line or after a lone CR", () => {
    expect(boundaryAfter("data: 1\n").keepAlive()).toBe(KEEP_ALIVE_LINE);
    expect(boundaryAfter("event: x\ndata: 1\r\n").keepAlive()).toBe(KEEP_ALIVE_LINE);
    expect(boundaryAfter("data: 1\n\ndata: {\"a\"").keepAlive()).toBeNull();
    expect(boundaryAfter("data: 1\r").keepAlive()).toBeNull();
  });

  test("what closes the open event before another one", () => {
    expect(boundaryAfter().closer()).toBe("");
    expect(boundaryAfter("data: 1\n\n").closer()).toBe("");
    expect(boundaryAfter("data: 1\n").closer()).toBe("\n");
    expect(boundaryAfter("data: {\"a\"").closer()).toBe("\n\n");
  });
});

describe("IdleTicker", () => {
  test("fires after the interval without writes, not while writes keep coming", async () => {
    let fired = 0;
    const ticker = new IdleTicker(60, () => fired++);
    const writing = setInterval(() => ticker.wrote(), 10);
    await Bun.sleep(250);
    clearInterval(writing);
    expect(fired).toBe(0);
    await Bun.sleep(220);
    expect(fired).toBeGreaterThanOrEqual(2);
    expect(fired).toBeLessThanOrEqual(4);
    ticker.stop();
    const stopped = fired;
    await Bun.sleep(150);
    expect(fired).toBe(stopped);
  });

  test("refuses an interval that is not positive", () => {
    expect(() => new IdleTicker(0, () => {})).toThrow(RangeError);
  });
});

test("the openai SDK reads a stream with keep-alive comments at every allowed place as it reads it without them", async () => {
  const chunk = (content: string, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: finish }] })}\n`;
  const comment = new TextDecoder().decode(KEEP_ALIVE_EVENT);
  const line = new TextDecoder().decode(KEEP_ALIVE_LINE);
  const plain = [chunk("Hel"), "\n", chunk("lo"), "\n", chunk("", "stop"), "\n", "data: [DONE]\n\n"];
  const commented = [comment, chunk("Hel"), line, "\n", comment, comment, chunk("lo"), line, line, "\n", chunk("", "stop"), "\n", comment, "data: [DONE]\n\n", comment];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(request) {
      const pieces = new URL(request.url).searchParams.has("comments") ? commented : plain;
      const stream = new ReadableStream<Uint8Array>({
        async start(controller) {
          for (const piece of pieces) {
            controller.enqueue(bytes(piece));
            await Bun.sleep(2);
          }
          controller.close();
        },
      });
      return new Response(stream, { headers: { "content-type": "text/event-stream" } });
    },
  });
  try {
    const read = async (query: string) => {
      const client = new OpenAI({ baseURL: `http://127.0.0.1:${server.port}/v1`, apiKey: "none", defaultQuery: query === "" ? undefined : { comments: "1" } });
      const chunks = [];
      for await (const part of await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true })) chunks.push(part);
      return chunks;
    };
    const without = await read("");
    const withComments = await read("comments");
    expect(without.map((c) => c.choices[0]!.delta.content).join("")).toBe("Hello");
    expect(withComments).toEqual(without);
  } finally {
    await server.stop(true);
  }
});
