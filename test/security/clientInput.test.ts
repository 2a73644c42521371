/**
 * No 5xx from client input (issue 18): null or non-object messages, JSON
 * nested 100,000 levels deep anywhere in a body, odd chunked encodings,
 * duplicate lengths and bodies past the size limit get a 4xx (with our JSON
 * error body wherever our code answers) and never an "internal error" log
 * line, on the proxy, the context API, and the generation routes (no model,
 * and the built-in engine with the tiny model).
 *
 * Bun 1.4.5 answers a malformed request head (duplicate Content-Length,
 * Content-Length with Transfer-Encoding, an unknown Transfer-Encoding) and a
 * malformed chunked body (size line too long or not hex, bare LF, chunk data
 * longer than its size) itself with "400 Bad Request", no body, and closes
 * the connection; no hook of Bun.serve sees these, so the tests assert the
 * 400 and the absence of an internal-error log only.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { ContextService } from "../../src/online/contextService.ts";
import { requestShapeProblem } from "../../src/proxy/requestShape.ts";
import { depthField, depthProblem, findTooDeep } from "../../src/http/jsonDepth.ts";
import { DEFAULT_LIMITS } from "../../src/http/limits.ts";
import { startServer, type RunningServer } from "../../src/server/serve.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { startProxy, type ProxyServer } from "../proxy/proxyKit.ts";
import { client, startTestServer, type Answer, type Client, type TestServer } from "../server/serverKit.ts";
import { chunkedParts, head, internalErrors, isErrorBody, parseJson, rawHttp, startOkUpstream, type OkUpstream } from "./clientInputKit.ts";

setDefaultTimeout(60_000);

const DEEP = 100_000;
const deepArray = (depth = DEEP) => "[".repeat(depth) + "]".repeat(depth);
const deepObject = (depth = DEEP) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
const MAX_DEPTH = DEFAULT_LIMITS.maxJsonDepth;

let upstream: OkUpstream;
let proxy: ProxyServer;
let context: TestServer;
const contextLogs: string[] = [];

beforeAll(async () => {
  upstream = startOkUpstream();
  proxy = await startProxy({ upstreams: [upstream.url] });
  context = await startTestServer({ server: { log: (text) => void contextLogs.push(text) } });
});

afterAll(async () => {
  await proxy?.close();
  await context?.close();
  await upstream?.stop();
});

/** A 4xx with {"error": {"message", "field"}}; returns the error. */
function expectClientError(answer: Answer, status?: number): { message: string; field: string } {
  if (!(answer.status >= 400 && answer.status < 500) || !isErrorBody(answer.body)) throw new Error(`expected a 4xx JSON error, got ${answer.status} ${answer.text.slice(0, 300)}`);
  if (status !== undefined) expect(answer.status).toBe(status);
  return answer.body.error;
}

describe("jsonDepth", () => {
  test("finds the first array or object past the limit, without recursion", () => {
    expect(findTooDeep({ a: [1, { b: "x" }] }, 3)).toBeNull();
    expect(findTooDeep({ a: [1, { b: [] }] }, 3)).toEqual(["a", 1, "b"]);
    expect(findTooDeep(JSON.parse(deepArray()), MAX_DEPTH)!.length).toBe(MAX_DEPTH);
    expect(findTooDeep(JSON.parse(deepObject()), MAX_DEPTH)!.length).toBe(MAX_DEPTH);
    expect(findTooDeep("text", 0)).toBeNull();
    // Depth first, in document order.
    expect(findTooDeep({ a: { b: {} }, c: { d: {} } }, 2)).toEqual(["a", "b"]);
  });

  test("names the field: the path's first steps up to the last named key", () => {
    expect(depthField(["messages", 0, "content", 0, 0, 0])).toBe("messages[0].content");
    expect(depthField(["ctxr", "a", "a", "a", "a"])).toBe("ctxr.a.a.a");
    expect(depthField(["documents", 0, 0, 0, 0])).toBe("documents");
    expect(depthField(["odd key", 1])).toBe('["odd key"]');
    expect(depthProblem({ messages: [{ content: JSON.parse(deepArray(100)) }] }, 64)).toMatchObject({
      field: "messages[0].content",
      message: "messages[0].content: nested deeper than 64 levels",
    });
  });

  test("request shapes: messages must be an array of objects with string roles", () => {
    expect(requestShapeProblem("chat", { messages: [{ role: "user", content: 5 }] })).toBeNull();
    expect(requestShapeProblem("chat", {})).toBeNull();
    expect(requestShapeProblem("chat", { messages: [{}, null] })).toEqual({ field: "messages[1]", message: "messages[1]: must be an object, got null" });
    expect(requestShapeProblem("chat", { messages: "hi" })?.field).toBe("messages");
    expect(requestShapeProblem("chat", { messages: [{ role: 1 }] })?.field).toBe("messages[0].role");
    expect(requestShapeProblem("completion", { prompt: { odd: [null] } })).toBeNull();
  });
});

describe("proxy: message and prompt shapes", () => {
  const chat = (messages: unknown, extra: Record<string, unknown> = {}) => proxy.post("/v1/chat/completions", { model: "m", messages, ...extra });

  test("null, number, string, boolean and array entries in messages are a 400 naming the entry", async () => {
    for (const entry of [null, 7, "hello", true, [], [{ role: "user", content: "x" }]]) {
      for (const extra of [{}, { documents: [{ id: "a", text: "alpha" }] }, { ctxr: { conversation_id: "c1" } }]) {
        const answer = await chat([{ role: "user", content: "first" }, entry, { role: "user", content: "q" }], extra);
        const error = expectClientError(answer, 400);
        expect(error.field).toBe("messages[1]");
        expect(error.message).toStartWith("messages[1]: must be an object");
      }
    }
    // The reviewer's case: a lone null message with documents.
    expect(expectClientError(await chat([null], { documents: [{ text: "d" }] }), 400).field).toBe("messages[0]");
    expect(internalErrors(proxy.logs)).toEqual([]);
  });

  test("messages that is not an array, and roles that are not strings, are a 400", async () => {
    for (const messages of [null, "hi", 5, { role: "user" }]) expect(expectClientError(await chat(messages), 400).field).toBe("messages");
    for (const role of [null, 5, {}, ["user"]]) expect(expectClientError(await chat([{ role, content: "x" }]), 400).field).toBe("messages[0].role");
    expect(internalErrors(proxy.logs)).toEqual([]);
  });

  test("odd content and odd prompts are forwarded as sent (the upstream decides)", async () => {
    const before = upstream.received;
    for (const content of [null, 5, { text: "x" }, [null, 5, "s", { type: "text", text: 7 }, { type: "text" }, []], [[["deep but not too deep"]]], true]) {
      const answer = await chat([{ role: "system", content }, { role: "user", content }], { documents: [{ id: 1, text: "one" }] });
      expect(answer.status).toBe(200);
    }
    // No role at all is forwarded too.
    expect((await chat([{ content: "x" }, {}])).status).toBe(200);
    for (const prompt of ["text", ["a", "b"], [1, 2, 3], [[1, 2], [3]], null, 5, { a: 1 }, [null], [["x", [1]]], true, [], ""]) {
      expect((await proxy.post("/v1/completions", { model: "m", prompt })).status).toBe(200);
    }
    expect(upstream.received - before).toBe(6 + 1 + 12);
    expect(internalErrors(proxy.logs)).toEqual([]);
  });
});

describe("JSON nested 100,000 deep", () => {
  const chatBodies: [string, string, string][] = [
    // [what, body, field named]
    ["message content, with documents", `{"model":"m","messages":[{"role":"user","content":${deepArray()}}],"documents":[{"text":"d"}]}`, "messages[0].content"],
    ["message content, objects", `{"messages":[{"role":"user","content":${deepObject()}}]}`, "messages[0].content.a"],
    ["a message's other field", `{"messages":[{"role":"tool","content":"r","tool_calls":${deepArray()}}]}`, "messages[0].tool_calls"],
    ["documents", `{"messages":[{"role":"user","content":"q"}],"documents":${deepArray()}}`, "documents"],
    ["a document's text", `{"messages":[{"role":"user","content":"q"}],"documents":[{"text":${deepObject()}}]}`, "documents[0].text.a"],
    ["ctxr", `{"messages":[{"role":"user","content":"q"}],"ctxr":${deepObject()}}`, "ctxr.a.a.a"],
    ["ctxr.conversation_id", `{"messages":[{"role":"user","content":"q"}],"ctxr":{"conversation_id":${deepArray()}}}`, "ctxr.conversation_id"],
    ["another field", `{"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"parameters":${deepObject()}}}]}`, "tools[0].function.parameters"],
    ["messages itself", `{"messages":${deepArray()}}`, "messages"],
  ];

  for (const [what, body, field] of chatBodies) {
    test(`proxy chat: ${what} -> 400 naming ${field}`, async () => {
      const error = expectClientError(await proxy.post("/v1/chat/completions", body), 400);
      expect(error.field).toBe(field);
      expect(error.message).toBe(`${field}: nested deeper than ${MAX_DEPTH} levels`);
    });
  }

  test("proxy completions: prompt, ctxr and other fields -> 400", async () => {
    for (const [body, field] of [
      [`{"prompt":${deepArray()}}`, "prompt"],
      [`{"prompt":"p","ctxr":{"reorder":${deepObject()}}}`, "ctxr.reorder.a.a"],
      [`{"prompt":"p","logit_bias":${deepObject()}}`, "logit_bias.a.a.a"],
    ] as const) {
      expect(expectClientError(await proxy.post("/v1/completions", body), 400).field).toBe(field);
    }
  });

  test("the proxy takes the server's limits.maxJsonDepth (not only the default)", async () => {
    const shallow = await startProxy({ upstreams: [upstream.url] }, { limits: { maxJsonDepth: 8 } });
    try {
      // body (1) > messages (2) > message (3) > content, an array 6 deep (4 to 9): 9 levels.
      const error = expectClientError(await shallow.post("/v1/chat/completions", `{"messages":[{"role":"user","content":${deepArray(6)}}]}`), 400);
      expect(error.message).toBe("messages[0].content: nested deeper than 8 levels");
      expect((await shallow.post("/v1/chat/completions", `{"messages":[{"role":"user","content":${deepArray(5)}}]}`)).status).toBe(200);
    } finally {
      await shallow.close();
    }
  });

  test(`proxy: ${MAX_DEPTH} levels pass, ${MAX_DEPTH + 1} do not`, async () => {
    // body (1) > messages (2) > message (3) > content (4) > ...
    const inner = (levels: number) => deepArray(levels);
    const ok = await proxy.post("/v1/chat/completions", `{"messages":[{"role":"user","content":${inner(MAX_DEPTH - 3)}}]}`);
    expect(ok.status).toBe(200);
    expect(expectClientError(await proxy.post("/v1/chat/completions", `{"messages":[{"role":"user","content":${inner(MAX_DEPTH - 2)}}]}`), 400).field).toBe("messages[0].content");
    expect(internalErrors(proxy.logs)).toEqual([]);
  });

  test("proxy: a top-level deep array or deep passthrough body", async () => {
    expectClientError(await proxy.post("/v1/chat/completions", deepArray()), 400);
    // Other /v1/* requests are passed through unparsed: the upstream answers.
    expect((await proxy.post("/v1/embeddings", `{"input":${deepArray()}}`)).status).toBe(200);
    expect(internalErrors(proxy.logs)).toEqual([]);
  });

  test("context API: /v1/reorder, /v1/schedule, /v1/dedup, /v1/evict -> 400 JSON", async () => {
    const bodies: [string, string][] = [
      ["/v1/reorder", `{"contexts":${deepArray()}}`],
      ["/v1/reorder", `{"contexts":[[{"id":1,"text":${deepObject()}}]]}`],
      ["/v1/reorder", `{"contexts":[[1,2]],"templates":${deepObject()}}`],
      ["/v1/reorder", `{"contexts":[[1,2]],"x":${deepArray()}}`],
      ["/v1/reorder", deepArray()],
      ["/v1/schedule", `{"contexts":[[${deepArray()}]]}`],
      ["/v1/dedup", `{"conversation_id":"c","blocks":${deepArray()}}`],
      ["/v1/dedup", `{"conversation_id":${deepObject()},"blocks":[1]}`],
      ["/v1/dedup", `{"conversation_id":"c","blocks":[{"id":${deepArray()}}]}`],
      ["/v1/evict", `{"request_ids":${deepArray()}}`],
      ["/v1/evict", `{"event":${deepArray()}}`],
    ];
    for (const [path, body] of bodies) expectClientError(await context.post(path, body), 400);
    expect(internalErrors(contextLogs)).toEqual([]);
  });

  test("generation routes without a model: 404 JSON, whatever the body", async () => {
    for (const path of ["/v1/chat/completions", "/v1/completions"]) {
      for (const body of [`{"messages":[${deepArray()}]}`, `{"messages":[null]}`, deepObject()]) expectClientError(await context.post(path, body), 404);
    }
    expect(internalErrors(contextLogs)).toEqual([]);
  });
});

describe("HTTP framing", () => {
  const servers = () =>
    [
      ["proxy", proxy.server.port, "/v1/chat/completions", proxy.logs],
      ["context API", context.server.port, "/v1/reorder", contextLogs],
    ] as const;
  const valid = { proxy: '{"messages":[{"role":"user","content":"hi"}]}', "context API": '{"contexts":[[1,2,3]]}' };
  const chunked = "Transfer-Encoding: chunked";

  const oddEncodings: [string, (path: string) => string][] = [
    ["a huge chunk-size line", (path) => `${head(path, [chunked])}\r\n\r\n${"f".repeat(100)}\r\n{}\r\n0\r\n\r\n`],
    ["a chunk size overflowing 64 bits", (path) => `${head(path, [chunked])}\r\n\r\n1${"0".repeat(16)}\r\n{}\r\n0\r\n\r\n`],
    ["the largest 64-bit chunk size", (path) => `${head(path, [chunked])}\r\n\r\nffffffffffffffff\r\n{}\r\n0\r\n\r\n`],
    ["a non-hex chunk size", (path) => `${head(path, [chunked])}\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`],
    ["bare LF line ends", (path) => `${head(path, [chunked])}\r\n\r\n2\n{}\n0\n\n`],
    ["chunk data longer than its size", (path) => `${head(path, [chunked])}\r\n\r\n1\r\n{}\r\n0\r\n\r\n`],
    ["two different Content-Lengths", (path) => `${head(path, ["Content-Length: 2", "Content-Length: 3"])}\r\n\r\n{} `],
    ["Content-Length with Transfer-Encoding", (path) => `${head(path, ["Content-Length: 5", chunked])}\r\n\r\n2\r\n{}\r\n0\r\n\r\n`],
    ["an unknown Transfer-Encoding", (path) => `${head(path, ["Transfer-Encoding: gzip"])}\r\n\r\n{}`],
  ];

  for (const [what, request] of oddEncodings) {
    test(`${what}: Bun's 400, no internal error`, async () => {
      for (const [name, port, path, logs] of servers()) {
        const answer = await rawHttp(port, [request(path)]);
        expect(`${name}: ${answer.status}`).toBe(`${name}: 400`);
        await Bun.sleep(50); // the handler's side of a rejected body settles
        expect(internalErrors(logs)).toEqual([]);
        // The server carries on.
        expect((await client(`http://127.0.0.1:${port}`).post(path, valid[name])).status).toBe(200);
      }
    });
  }

  test("a chunked body cut off (no final chunk, then close): no answer needed, no internal error", async () => {
    for (const [, port, path, logs] of servers()) {
      const answer = await rawHttp(port, [`${head(path, [chunked])}\r\n\r\n2\r\n{}\r\n`], { end: true });
      expect(answer.status === null || (answer.status >= 400 && answer.status < 500)).toBe(true);
      await Bun.sleep(50);
      expect(internalErrors(logs)).toEqual([]);
    }
  });

  test("valid chunked bodies are read (the proxy streams them under its limit)", async () => {
    for (const [name, port, path] of servers()) {
      const body = name === "proxy" ? `{"messages":[{"role":"user","content":"${"word ".repeat(400_000)}"}]}` : valid[name];
      const parts: string[] = [];
      for (let i = 0; i < body.length; i += 65_536) {
        const piece = body.slice(i, i + 65_536);
        parts.push(`${piece.length.toString(16)}\r\n${piece}\r\n`);
      }
      const answer = await rawHttp(port, [`${head(path, [chunked, "Connection: close"])}\r\n\r\n`, ...parts, "0\r\n\r\n"]);
      expect(`${name}: ${answer.status}`).toBe(`${name}: 200`);
    }
  });

  const TOO_LARGE = 20 * 1024 * 1024; // past the old Bun cap of 2 x 8 MiB + 1 MiB
  test(`bodies of ${TOO_LARGE / 1024 / 1024} MiB with Content-Length: our JSON 413`, async () => {
    for (const [name, port, path, logs] of servers()) {
      const answer = await rawHttp(port, [`${head(path, [`Content-Length: ${TOO_LARGE}`])}\r\n\r\n`, ...chunkedParts(TOO_LARGE).filter((_, i) => i % 3 === 1)]);
      expect(`${name}: ${answer.status}`).toBe(`${name}: 413`);
      expect(isErrorBody(parseJson(answer.body))).toBe(true);
      expect((parseJson(answer.body) as { error: { field: string } }).error.field).toBe("body");
      expect(internalErrors(logs)).toEqual([]);
    }
    // And through fetch.
    const answer = await proxy.request("POST", "/v1/chat/completions", { body: new Uint8Array(TOO_LARGE).fill(0x20), headers: { "content-type": "application/json" } });
    expectClientError(answer, 413);
  });

  test(`bodies of ${TOO_LARGE / 1024 / 1024} MiB, chunked: our JSON 413`, async () => {
    for (const [name, port, path, logs] of servers()) {
      const answer = await rawHttp(port, [`${head(path, [chunked])}\r\n\r\n`, ...chunkedParts(TOO_LARGE)]);
      expect(`${name}: ${answer.status}`).toBe(`${name}: 413`);
      expect(isErrorBody(parseJson(answer.body))).toBe(true);
      await Bun.sleep(50);
      expect(internalErrors(logs)).toEqual([]);
    }
  });

  test("just over the limit (8 MiB + 1), both ways: our JSON 413", async () => {
    const size = DEFAULT_LIMITS.maxBodyBytes + 1;
    for (const [name, port, path] of servers()) {
      const withLength = await rawHttp(port, [`${head(path, [`Content-Length: ${size}`])}\r\n\r\n`, new Uint8Array(size).fill(0x20)]);
      const asChunks = await rawHttp(port, [`${head(path, [chunked])}\r\n\r\n`, ...chunkedParts(size)]);
      for (const answer of [withLength, asChunks]) {
        expect(`${name}: ${answer.status}`).toBe(`${name}: 413`);
        expect(isErrorBody(parseJson(answer.body))).toBe(true);
      }
    }
  });
});

describe("the built-in engine (tiny model)", () => {
  let model: { path: string; cleanup(): void };
  let engine: GenerationEngine;
  let service: ContextService;
  let server: RunningServer;
  let api: Client;
  const logs: string[] = [];

  beforeAll(async () => {
    const runner = buildRunner();
    model = tinyModelFolder({}, "tiny-llama");
    engine = await GenerationEngine.open({ model: model.path, runner, kvBlocks: 64, threads: 1 });
    service = await ContextService.open({ dataDir: null });
    server = startServer(service, { host: "127.0.0.1", port: 0, engine, log: (text) => void logs.push(text) });
    api = client(server.url);
  }, 300_000);

  afterAll(async () => {
    await server?.stop(1000);
    await engine?.close();
    await service?.close();
    model?.cleanup();
  });

  test("null and non-object messages: 400", async () => {
    for (const entry of [null, 7, "hello", [], true]) {
      expect(expectClientError(await api.post("/v1/chat/completions", { messages: [{ role: "user", content: "q" }, entry], max_tokens: 1 }), 400).field).toStartWith("messages");
    }
    expect(internalErrors(logs)).toEqual([]);
  });

  test("100,000-deep nesting anywhere: 400 JSON", async () => {
    const chat = (fields: string) => `{"max_tokens":1,"messages":[{"role":"user","content":"q"}],${fields}}`;
    const bodies: [string, string][] = [
      ["/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":${deepArray()}}]}`],
      ["/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":[${deepObject()}]}]}`],
      ["/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":"q","name":${deepArray()}}]}`],
      ["/v1/chat/completions", chat(`"documents":${deepArray()}`)],
      ["/v1/chat/completions", chat(`"documents":[{"text":${deepObject()}}]`)],
      ["/v1/chat/completions", chat(`"ctxr":${deepObject()}`)],
      ["/v1/chat/completions", chat(`"chat_template_kwargs":${deepObject()}`)],
      ["/v1/chat/completions", chat(`"tools":${deepArray()}`)],
      ["/v1/chat/completions", chat(`"extra":${deepObject()}`)],
      ["/v1/chat/completions", deepArray()],
      ["/v1/completions", `{"max_tokens":1,"prompt":${deepArray()}}`],
      ["/v1/completions", `{"max_tokens":1,"segments":${deepArray()}}`],
      ["/v1/completions", `{"max_tokens":1,"prompt":"p","ctxr":{"policy":${deepObject()}}}`],
      ["/v1/completions", `{"max_tokens":1,"prompt":"p","extra":${deepArray()}}`],
    ];
    const failures: string[] = [];
    for (const [path, body] of bodies) {
      const answer = await api.post(path, body);
      if (!(answer.status >= 400 && answer.status < 500 && isErrorBody(answer.body))) failures.push(`${path} ${body.slice(0, 80)}: ${answer.status} ${answer.text.slice(0, 200)}`);
    }
    expect(failures).toEqual([]);
    expect(internalErrors(logs)).toEqual([]);
  });
});
