/**
 * POST /v1/responses through the proxy (`ctxr serve --upstream URL`) in front of a real upstream:
 * another ctxr serving a tiny model (`serve --model`, in process, the real CPU runner), which
 * keeps previous_response_id state. The openai SDK's responses.create and responses.stream pass
 * through; an unknown previous_response_id comes back as the upstream's 404; the `documents`
 * extension is rendered and reordered as chat's is (the same prompt reaches the upstream as for
 * the equivalent chat request) and deduplicated across responses chained in one conversation.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import OpenAI from "openai";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { startEngineServer, type EngineTestServer } from "../server/serverKit.ts";
import { docs, startProxy, type ProxyServer } from "./proxyKit.ts";

setDefaultTimeout(120_000);

let model: { path: string; cleanup(): void };
let upstream: EngineTestServer;
let ctxr: ProxyServer;
let openai: OpenAI;

beforeAll(async () => {
  model = tinyModelFolder({}, "tiny-upstream");
  upstream = await startEngineServer(model.path, { threads: 1 });
  ctxr = await startProxy({ upstreams: [upstream.url] });
  openai = new OpenAI({ baseURL: `${ctxr.url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 300_000);

afterAll(async () => {
  await ctxr?.close();
  await upstream?.close();
  model?.cleanup();
});

const upstreamStats = async () => (await ctxr.get("/v1/stats")).body.upstreams[0];

describe("/v1/responses through the proxy", () => {
  test("responses.create and previous_response_id reach the upstream, which keeps the state; an unknown id is its 404", async () => {
    const first = await openai.responses.create({ model: "tiny-upstream", input: "Hello", max_output_tokens: 4, temperature: 0 });
    expect(first.id).toMatch(/^resp_/);
    expect(first.object).toBe("response");
    const continued = await openai.responses.create({ input: "And then?", previous_response_id: first.id, max_output_tokens: 1 });
    expect(continued.previous_response_id).toBe(first.id);
    expect(continued.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens);
    const unknown = await ctxr.post("/v1/responses", { input: "Hi", previous_response_id: "resp_nope" });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.field).toBe("previous_response_id");
  });

  test("responses.stream: the upstream's events arrive through the proxy", async () => {
    const stream = openai.responses.stream({ input: "Hello", max_output_tokens: 4, temperature: 0 });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types[0]).toBe("response.created");
    expect(["response.completed", "response.incomplete"]).toContain(types.at(-1)!);
    expect(types).toContain("response.output_text.delta");
  });

  test("documents: rendered and reordered as for the equivalent chat request (the upstream sees the same prompt)", async () => {
    const documents = docs("alpha", "beta", "gamma");
    await ctxr.post("/v1/reset");
    const before = await upstreamStats();
    const response = await ctxr.post("/v1/responses", { input: [{ role: "user", content: [{ type: "input_text", text: "Which one?" }] }], instructions: "Answer.", documents, max_output_tokens: 1, ctxr: { conversation_id: "r1" } });
    expect(response.status).toBe(200);
    expect((await upstreamStats()).documents - before.documents).toBe(3);
    await ctxr.post("/v1/reset");
    const chat = await ctxr.post("/v1/chat/completions", { messages: [{ role: "system", content: "Answer." }, { role: "user", content: [{ type: "text", text: "Which one?" }] }], documents, max_tokens: 1, ctxr: { conversation_id: "c1" } });
    expect(chat.status).toBe(200);
    expect(response.body.usage.input_tokens).toBe(chat.body.usage.prompt_tokens);
    const bare = await upstream.post("/v1/responses", { input: "Which one?", instructions: "Answer.", max_output_tokens: 1 });
    expect(response.body.usage.input_tokens).toBeGreaterThan(bare.body.usage.input_tokens + 30);
  });

  test("documents sent in an earlier response of the conversation are deduplicated in the next (chained with previous_response_id)", async () => {
    const documents = docs("delta", "epsilon");
    await ctxr.post("/v1/reset");
    const first = await ctxr.post("/v1/responses", { input: "First question?", documents, max_output_tokens: 2, ctxr: { conversation_id: "chain" } });
    expect(first.status).toBe(200);
    const before = await upstreamStats();
    const deduplicated = await ctxr.post("/v1/responses", { input: "Second question?", previous_response_id: first.body.id, documents, max_output_tokens: 1, ctxr: { conversation_id: "chain" } });
    expect(deduplicated.status).toBe(200);
    expect((await upstreamStats()).documents_deduplicated - before.documents_deduplicated).toBe(2);
    const resent = await ctxr.post("/v1/responses", { input: "Second question?", previous_response_id: first.body.id, documents, max_output_tokens: 1, ctxr: { conversation_id: "chain-2", dedup: false } });
    expect(resent.status).toBe(200);
    expect(deduplicated.body.usage.input_tokens).toBeLessThan(resent.body.usage.input_tokens);
  });

  test("a malformed input is a 400 from ctxr naming it", async () => {
    const answer = await ctxr.post("/v1/responses", { input: [5] });
    expect(answer.status).toBe(400);
    expect(answer.body.error.field).toBe("input[0]");
  });
});
