/** Invalid input, limits, authentication and error answers through the real server. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { OpenAPIHono } from "@hono/zod-openapi";
import { createApp } from "../../src/server/app.ts";
import { ContextService } from "../../src/online/contextService.ts";
import { client, startTestServer, type Answer, type TestServer } from "./serverKit.ts";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server.close();
});

function expectError(answer: Answer, status: number, field: string, message?: RegExp): void {
  expect({ status: answer.status, field: answer.body?.error?.field }).toEqual({ status, field });
  expect(typeof answer.body.error.message).toBe("string");
  if (field !== "") expect(answer.body.error.message.startsWith(`${field}: `)).toBe(true);
  if (message) expect(answer.body.error.message).toMatch(message);
  expect(Object.keys(answer.body)).toEqual(["error"]);
  // OpenAI's shape beside ctxr's field: type by status, param (null for the body as a whole or no field), a code.
  const type = status === 401 ? "authentication_error" : status === 404 ? "not_found_error" : status === 429 ? "rate_limit_error" : status === 503 ? "service_unavailable" : status >= 500 ? "server_error" : "invalid_request_error";
  expect(answer.body.error).toMatchObject({ type, param: field === "" || field === "body" ? null : field });
  expect(answer.body.error.code).toMatch(/^[a-z_]+$/);
}

describe("400 names the offending field", () => {
  const cases: [string, string, unknown, string, RegExp?][] = [
    ["a block of the wrong type", "/v1/reorder", { contexts: [[1], [2], [3, 4, 5, 6, 7, null]] }, "contexts[2][5]", /expected a block/],
    ["a fractional block id", "/v1/reorder", { contexts: [[1.5]] }, "contexts[0][0]"],
    ["an unsafe integer", "/v1/reorder", { contexts: [[1, 2 ** 60]] }, "contexts[0][1]"],
    ["an empty string id", "/v1/reorder", { contexts: [[""]] }, "contexts[0][0]"],
    ["a block object without id or text", "/v1/reorder", { contexts: [[1, { tokens: 3 }]] }, "contexts[0][1]", /"id" or "text"/],
    ["a block object with another key", "/v1/reorder", { contexts: [[{ id: 1, url: "x" }]] }, "contexts[0][0].url", /unknown field/],
    ["a non-positive tokens", "/v1/reorder", { contexts: [[{ id: 1, tokens: 0 }]] }, "contexts[0][0].tokens"],
    ["a fractional tokens", "/v1/reorder", { contexts: [[{ id: 1, tokens: 2.5 }]] }, "contexts[0][0].tokens"],
    ["a null id in an object", "/v1/reorder", { contexts: [[{ id: null, text: "x" }]] }, "contexts[0][0].id"],
    ["a text that is not a string", "/v1/reorder", { contexts: [[{ text: 5 }]] }, "contexts[0][0].text"],
    ["an id over 1024 characters", "/v1/reorder", { contexts: [["x".repeat(1025)]] }, "contexts[0][0]"],
    ["an object id over 1024 characters", "/v1/reorder", { contexts: [[{ id: "y".repeat(1025) }]] }, "contexts[0][0].id"],
    ["a text over 1 MiB", "/v1/reorder", { contexts: [[{ text: "z".repeat(1024 * 1024 + 1) }]] }, "contexts[0][0].text"],
    ["an empty context", "/v1/reorder", { contexts: [[1], []] }, "contexts[1]"],
    ["no contexts", "/v1/reorder", { contexts: [] }, "contexts"],
    ["contexts missing", "/v1/reorder", {}, "contexts", /required/],
    ["contexts not an array", "/v1/reorder", { contexts: { 0: [1] } }, "contexts"],
    ["an unknown top-level field", "/v1/reorder", { contexts: [[1]], conversationId: "x" }, "conversationId", /unknown field/],
    ["an empty conversation id", "/v1/reorder", { contexts: [[1]], conversation_id: "" }, "conversation_id"],
    ["a conversation id over 256 characters", "/v1/reorder", { contexts: [[1]], conversation_id: "c".repeat(257) }, "conversation_id"],
    ["a priority template without {order}", "/v1/reorder", { contexts: [[1]], templates: { priority: "read it" } }, "templates.priority", /\{order\}/],
    ["a doc template without {n}", "/v1/reorder", { contexts: [[1]], templates: { doc: "[Doc]" } }, "templates.doc", /\{n\}/],
    ["an unknown template", "/v1/reorder", { contexts: [[1]], templates: { footer: "x" } }, "templates.footer"],
    ["a body that is an array", "/v1/reorder", [[1, 2]], "body", /JSON object/],
    ["a body that is a number", "/v1/reorder", 42, "body"],
    ["an unknown method", "/v1/schedule", { contexts: [[1]], method: "magic" }, "method"],
    ["a negative alpha", "/v1/schedule", { contexts: [[1]], alpha: -1 }, "alpha"],
    ["an unknown linkage", "/v1/schedule", { contexts: [[1]], linkage: "ward" }, "linkage"],
    ["a bad block in a schedule", "/v1/schedule", { contexts: [[1], [true]] }, "contexts[1][0]"],
    ["dedup without conversation", "/v1/dedup", { blocks: [1] }, "conversation_id", /required/],
    ["dedup with a bad block", "/v1/dedup", { conversation_id: "c", blocks: [1, 2, {}] }, "blocks[2]"],
    ["dedup with a dedup template without {doc}", "/v1/dedup", { conversation_id: "c", blocks: [1], templates: { dedup: "seen" } }, "templates.dedup", /\{doc\}/],
    ["evict with ids that are not strings", "/v1/evict", { request_ids: ["a", 5] }, "request_ids[1]"],
    ["evict with an empty id", "/v1/evict", { request_ids: [""] }, "request_ids[0]"],
    ["evict without ids", "/v1/evict", { ids: ["a"] }, "request_ids", /required/],
  ];
  for (const [what, path, body, field, message] of cases) {
    test(`${what} -> ${field}`, async () => {
      expectError(await server.post(path, body), 400, field, message);
    });
  }

  test("a block repeated inside one context (detected by the service) -> 400 with its field", async () => {
    expectError(await server.post("/v1/reorder", { contexts: [[1, 2], [3, "x", { id: "x" }]] }), 400, "contexts[1][2]", /appears twice/);
    expectError(await server.post("/v1/schedule", { contexts: [[1, 1]] }), 400, "contexts[0][1]", /appears twice/);
    expectError(await server.post("/v1/dedup", { conversation_id: "c", blocks: [{ text: "a  b" }, { text: "a b" }] }), 400, "blocks[1]", /appears twice/);
    expect((await server.get("/v1/stats")).body).toMatchObject({ contexts: 0, conversations: 0, distinct_blocks: 0 });
  });

  test("invalid JSON, an empty body, and the wrong content type", async () => {
    expectError(await server.post("/v1/reorder", '{"contexts": [[1, 2'), 400, "body", /invalid JSON/);
    expectError(await server.post("/v1/reorder", ""), 400, "body", /invalid JSON/);
    expectError(await server.post("/v1/reorder", "{'contexts': [[1]]}"), 400, "body", /invalid JSON/);
    expectError(await server.request("POST", "/v1/reorder", { body: '{"contexts": [[1]]}', headers: { "content-type": "text/plain" } }), 415, "body", /application\/json/);
    expectError(await server.request("POST", "/v1/reorder", { body: "contexts=1", headers: { "content-type": "application/x-www-form-urlencoded" } }), 415, "body");
    // No content type and no body: the body is missing.
    expectError(await server.request("POST", "/v1/evict"), 400, "request_ids", /required/);
    // application/json with parameters, and +json types, are JSON.
    expect((await server.post("/v1/evict", { request_ids: [] }, { "content-type": "application/json; charset=utf-8" })).status).toBe(200);
  });
});

describe("routes and methods", () => {
  test("an unknown route is a JSON 404; a wrong method a JSON 405 with Allow", async () => {
    const missing = await server.get("/v2/reorder");
    expect(missing.status).toBe(404);
    expect(missing.body.error.message).toContain("/v2/reorder");
    const wrong = await server.get("/v1/reorder");
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toBe("POST");
    expect(wrong.body.error.message).toContain("GET");
    const wrongPost = await server.post("/healthz", {});
    expect(wrongPost.status).toBe(405);
    expect(wrongPost.headers.get("allow")).toBe("GET, HEAD");
    expect((await server.request("DELETE", "/v1/stats")).status).toBe(405);
    expect((await server.request("HEAD", "/healthz")).status).toBe(200);
  });

  test("a real internal error is a JSON 500 with a generic message, logged", async () => {
    const service = await ContextService.open({ dataDir: null });
    const logged: string[] = [];
    const broken = new Proxy(service, {
      get(target, name, receiver) {
        if (name === "stats") return () => {
          throw new Error("disk on fire");
        };
        return Reflect.get(target, name, receiver);
      },
    });
    const app: OpenAPIHono = createApp(broken, { log: (text) => void logged.push(text) });
    const bun = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: app.fetch });
    try {
      const c = client(`http://127.0.0.1:${bun.port}`);
      const answer = await c.get("/v1/stats");
      expect(answer.status).toBe(500);
      expect(answer.body).toEqual({ error: { message: "internal server error", type: "server_error", param: null, code: "internal_error", field: "" } });
      expect(logged.join("")).toContain("disk on fire");
      expect((await c.get("/healthz")).status).toBe(200);
    } finally {
      await bun.stop(true);
      await service.close();
    }
  });
});

describe("limits", () => {
  let limited: TestServer;
  beforeAll(async () => {
    limited = await startTestServer({ server: { limits: { maxBodyBytes: 2000, maxContexts: 4, maxBlocks: 3 } } });
  });
  afterAll(async () => {
    await limited.close();
  });

  test("a body over --max-body-bytes -> JSON 413, with or without Content-Length", async () => {
    const big = JSON.stringify({ contexts: [[{ text: "x".repeat(2100) }]] });
    expectError(await limited.post("/v1/reorder", big), 413, "body", /larger than 2000 bytes/);
    const chunks = [new TextEncoder().encode(big.slice(0, 1000)), new TextEncoder().encode(big.slice(1000))];
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = chunks.shift();
        if (next === undefined) controller.close();
        else controller.enqueue(next);
      },
    });
    const streamed = await fetch(`${limited.url}/v1/reorder`, { method: "POST", body: stream, headers: { "content-type": "application/json" } });
    expect(streamed.status).toBe(413);
    expect(((await streamed.json()) as { error: { field: string } }).error.field).toBe("body");
    expect((await limited.post("/v1/reorder", { contexts: [[{ text: "x".repeat(1500) }]] })).status).toBe(200);
  });

  test("too many contexts or blocks -> 400 naming the field", async () => {
    expectError(await limited.post("/v1/reorder", { contexts: [[1], [2], [3], [4], [5]] }), 400, "contexts", /<=4/);
    expectError(await limited.post("/v1/reorder", { contexts: [[1], [2, 3, 4, 5]] }), 400, "contexts[1]", /<=3/);
    expectError(await limited.post("/v1/schedule", { contexts: [[1], [2], [3], [4], [5]] }), 400, "contexts");
    expectError(await limited.post("/v1/dedup", { conversation_id: "c", blocks: [1, 2, 3, 4] }), 400, "blocks");
    expect((await limited.post("/v1/reorder", { contexts: [[1], [2], [3], [4, 5, 6]] })).status).toBe(200);
  });

  test("method cluster is refused above its own limit (N² time and memory)", async () => {
    const clustered = await startTestServer({ server: { limits: { maxClusterContexts: 3 } } });
    try {
      const contexts = [[1], [2], [3], [4]];
      expectError(await clustered.post("/v1/schedule", { contexts, method: "cluster" }), 400, "method", /at most 3 contexts/);
      expect((await clustered.post("/v1/schedule", { contexts, method: "trie" })).status).toBe(200);
      expect((await clustered.post("/v1/schedule", { contexts: contexts.slice(0, 3), method: "cluster" })).status).toBe(200);
    } finally {
      await clustered.close();
    }
  });

  test("the OpenAPI document shows the configured limits", async () => {
    const doc = (await limited.get("/openapi.json")).body;
    expect(doc.components.schemas.ReorderRequest.properties.contexts.maxItems).toBe(4);
    expect(doc.components.schemas.ReorderRequest.properties.contexts.items.maxItems).toBe(3);
  });
});

describe("API key", () => {
  let secured: TestServer;
  beforeAll(async () => {
    secured = await startTestServer({ server: { apiKey: "s3cret-key" } });
  });
  afterAll(async () => {
    await secured.close();
  });

  test("every POST needs the key (Bearer or x-api-key) -> 401 JSON otherwise", async () => {
    const posts: [string, unknown][] = [
      ["/v1/reorder", { contexts: [[1]] }],
      ["/v1/schedule", { contexts: [[1]] }],
      ["/v1/dedup", { conversation_id: "c", blocks: [1] }],
      ["/v1/evict", { request_ids: [] }],
      ["/v1/reset", undefined],
    ];
    for (const [path, body] of posts) {
      const attempts: Record<string, string>[] = [{}, { authorization: "Bearer wrong" }, { "x-api-key": "s3cret-ke" }, { authorization: "s3cret-key" }, { authorization: "Basic s3cret-key" }, { "x-api-key": "" }];
      for (const headers of attempts) {
        const answer = await secured.post(path, body, headers);
        expect(answer.status).toBe(401);
        expect(answer.body.error.message).toContain("API key");
        expect(answer.headers.get("www-authenticate")).toContain("Bearer");
      }
      expect((await secured.post(path, body, { authorization: "Bearer s3cret-key" })).status).toBe(200);
      expect((await secured.post(path, body, { "x-api-key": "s3cret-key" })).status).toBe(200);
    }
    // The key is checked before the body: no validation details leak without it.
    expect((await secured.post("/v1/reorder", "{bad json")).status).toBe(401);
    expect((await secured.get("/v1/stats")).body.contexts).toBe(0);
  });

  test("GET routes stay open", async () => {
    for (const path of ["/healthz", "/v1/stats", "/metrics", "/openapi.json"]) expect((await secured.get(path)).status).toBe(200);
    const doc = (await secured.get("/openapi.json")).body;
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(["apiKeyHeader", "bearerAuth"]);
    expect(doc.paths["/v1/reorder"].post.security).toEqual([{ bearerAuth: [] }, { apiKeyHeader: [] }]);
    expect(doc.paths["/v1/reorder"].post.responses["401"]).toBeDefined();
  });
});
