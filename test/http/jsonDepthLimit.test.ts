import { describe, expect, test } from "bun:test";
import { Hono } from "hono";
import { jsonDepthLimit } from "../../src/http/jsonDepthLimit.ts";

function app(maxDepth: number) {
  const seen: unknown[] = [];
  const hono = new Hono();
  hono.post("/", jsonDepthLimit(maxDepth), async (c) => {
    seen.push(await c.req.json());
    return c.json({ ok: true });
  });
  const post = (body: string, type = "application/json") => hono.request("/", { method: "POST", headers: { "content-type": type }, body });
  return { post, seen };
}

describe("jsonDepthLimit", () => {
  test("refuses a body nested deeper than the limit, naming the field, before the handler runs", async () => {
    const { post, seen } = app(3);
    const answer = await post(JSON.stringify({ messages: [{ content: [[1]] }] }));
    expect(answer.status).toBe(400);
    const body = (await answer.json()) as { error: { message: string; param: string } };
    expect(body.error.message).toBe("messages[0].content: nested deeper than 3 levels");
    expect(body.error.param).toBe("messages[0].content");
    expect(seen).toEqual([]);
  });

  test("passes a body at the limit on, parsed once for the handler", async () => {
    const { post, seen } = app(3);
    const answer = await post(JSON.stringify({ messages: [{ content: "x" }] }));
    expect(answer.status).toBe(200);
    expect(seen).toEqual([{ messages: [{ content: "x" }] }]);
  });

  test("a 100,000-level body is refused without a stack overflow", async () => {
    const { post } = app(64);
    const answer = await post(`{"a":${"[".repeat(100_000)}${"]".repeat(100_000)}}`);
    expect(answer.status).toBe(400);
  });

  test("leaves bodies that are not JSON, or do not parse, to what follows", async () => {
    const { post, seen } = app(3);
    // Not declared JSON: not checked here (the route's json validator refuses the content type).
    expect((await post("[[[[1]]]]", "text/plain")).status).toBe(200);
    expect(seen).toEqual([[[[[1]]]]]);
    // Declared JSON but malformed: passed on, so that the validator's own error answers it.
    expect((await post("{not json")).status).toBe(500);
    expect(seen).toHaveLength(1);
  });
});
