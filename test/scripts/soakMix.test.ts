/** The soak benchmark's traffic (scripts/soakMix.ts): the weighted draw and each kind's request. */
import { describe, expect, test } from "bun:test";
import { seeded } from "../../scripts/benchTtfb.ts";
import { DEFAULT_WEIGHTS, TRAFFIC_KINDS, documentPool, drawDocuments, parseWeights, pickWeighted, soakRequest } from "../../scripts/soakMix.ts";

describe("pickWeighted", () => {
  test("draws each key about weight/total of the time; never a zero weight", () => {
    const random = seeded(7);
    const counts: Record<string, number> = { a: 0, b: 0, c: 0 };
    for (let i = 0; i < 20_000; i++) counts[pickWeighted({ a: 1, b: 3, c: 0 }, random)]!++;
    expect(counts.c).toBe(0);
    expect(counts.b! / 20_000).toBeGreaterThan(0.73);
    expect(counts.b! / 20_000).toBeLessThan(0.77);
  });

  test("the edges of [0, 1) and no positive weight", () => {
    expect(pickWeighted({ a: 1, b: 1 }, () => 0)).toBe("a");
    expect(pickWeighted({ a: 1, b: 1 }, () => 0.999999)).toBe("b");
    expect(() => pickWeighted({ a: 0 }, () => 0.5)).toThrow();
  });
});

describe("parseWeights", () => {
  test("overrides named kinds, refuses unknown kinds and bad weights", () => {
    expect(parseWeights("malformed=0, chat=50")).toEqual({ ...DEFAULT_WEIGHTS, malformed: 0, chat: 50 });
    expect(parseWeights(undefined)).toEqual(DEFAULT_WEIGHTS);
    expect(() => parseWeights("chatty=1")).toThrow(/unknown kind/);
    expect(() => parseWeights("chat=-1")).toThrow(/>= 0/);
  });
});

describe("requests", () => {
  const shape = { model: "m", documents: documentPool(10, 120), documentsPerRequest: 3, maxTokens: 16, overlongChars: 9000 };

  test("documents: distinct, in pool order, popular ones more often", () => {
    const random = seeded(3);
    let first = 0;
    for (let i = 0; i < 500; i++) {
      const drawn = drawDocuments(shape.documents, 3, random);
      expect(new Set(drawn.map((d) => d.id)).size).toBe(3);
      const order = drawn.map((d) => Number(d.id.slice(4)));
      expect(order).toEqual([...order].sort((a, b) => a - b));
      if (order.includes(0)) first++;
    }
    expect(first).toBeGreaterThan(250); // doc 0 has the largest weight of 10
  });

  test("each kind: path, streaming, hang-up and expected status; bodies parse except a bad-JSON malformed one", () => {
    const random = seeded(11);
    for (const kind of TRAFFIC_KINDS) {
      for (let i = 0; i < 20; i++) {
        const request = soakRequest(kind, shape, random);
        expect(request.kind).toBe(kind);
        expect(request.expectStatus).toBe(kind === "overlong" || kind === "malformed" ? 400 : 200);
        expect(request.hangUp !== null).toBe(kind.startsWith("hangup"));
        if (request.hangUp?.after === "delay") expect(request.hangUp.ms).toBeGreaterThanOrEqual(100);
        let body: any;
        try {
          body = JSON.parse(request.body);
        } catch {
          expect(kind).toBe("malformed");
          continue;
        }
        expect(body.stream === true).toBe(request.stream);
        if (request.stream) expect(body.stream_options).toEqual({ include_usage: true });
        if (kind === "stream_documents" || kind.startsWith("hangup")) expect(body.documents.length).toBeGreaterThanOrEqual(1);
        if (kind === "n_choices") expect(body.n).toBeGreaterThanOrEqual(2);
        if (kind === "overlong") expect(body.messages[0].content.length).toBe(9000);
        if (kind === "completion") expect(request.path).toBe("/v1/completions");
        if (kind !== "malformed") expect(body.max_tokens).toBeLessThanOrEqual(16);
      }
    }
  });

  test("the same seed gives the same requests", () => {
    const draw = (seed: number) => {
      const random = seeded(seed);
      return Array.from({ length: 30 }, () => soakRequest(pickWeighted(DEFAULT_WEIGHTS, random), shape, random).body);
    };
    expect(draw(5)).toEqual(draw(5));
    expect(draw(5)).not.toEqual(draw(6));
  });
});
