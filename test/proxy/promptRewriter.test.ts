import { afterEach, describe, expect, test } from "bun:test";
import { RequestError } from "../../src/http/requestError.ts";
import { ContextService } from "../../src/online/contextService.ts";
import { PromptRewriter, type RewriteResult } from "../../src/proxy/promptRewriter.ts";

const services: ContextService[] = [];
/** A rewriter whose every rewrite is committed, as the proxy does once the engine accepted the request. */
async function rewriter(): Promise<PromptRewriter> {
  const service = await ContextService.open({ dataDir: null });
  services.push(service);
  const inner = new PromptRewriter(service);
  const committed = (rewrite: (body: Record<string, unknown>) => Promise<RewriteResult>) => async (body: Record<string, unknown>) => {
    const result = await rewrite(body);
    result.commit();
    return result;
  };
  return Object.assign(Object.create(inner), { rewriteChat: committed(inner.rewriteChat.bind(inner)), rewriteCompletion: committed(inner.rewriteCompletion.bind(inner)) });
}
afterEach(async () => {
  for (const s of services.splice(0)) await s.close();
});

const docs = (...names: string[]) => names.map((n) => ({ id: n, text: `${n} is a document about ${n}.` }));
const userText = (body: Record<string, unknown>, index: number) => ((body.messages as { content: string }[])[index]!).content;

describe("PromptRewriter.rewriteChat", () => {
  test("the documents field is rendered into the user message, removed, and reordered against earlier requests", async () => {
    const r = await rewriter();
    const first = await r.rewriteChat({ model: "m", messages: [{ role: "user", content: "Q1?" }], documents: docs("A", "B", "C"), ctxr: { conversation_id: "c1" } });
    expect(first.body.documents).toBeUndefined();
    expect(first.body.ctxr).toBeUndefined();
    expect(first.body.model).toBe("m");
    expect(first.documents).toBe(3);
    expect(userText(first.body, 0)).toStartWith('<documents>\n<document id="A">\nA is a document about A.\n</document>\n<document id="B">');
    expect(userText(first.body, 0)).toEndWith("</documents>\nPlease read the context in the following priority order: [Doc 1] > [Doc 2] > [Doc 3] and answer the question.\n\nQ1?");
    expect(first.requestId).toMatch(/^ctxr-/);

    // Another conversation retrieving C and B (and D): the cached A-B-C path gives no prefix (A is missing)…
    const second = await r.rewriteChat({ messages: [{ role: "user", content: "Q2?" }], documents: docs("B", "D", "A"), ctxr: { conversation_id: "c2" } });
    const text = userText(second.body, 0);
    // …but A, B are a cached prefix: they come first, D after; the annotation restores B > D > A.
    expect(text.indexOf('id="A"')).toBeLessThan(text.indexOf('id="B"'));
    expect(text.indexOf('id="B"')).toBeLessThan(text.indexOf('id="D"'));
    expect(text).toContain("priority order: [Doc 2] > [Doc 3] > [Doc 1]");
    expect(second.estimatedCachedTokens).toBeGreaterThan(0);
    // In the order the client gave (B first) nothing was cached: the baseline reordering beats.
    expect(second.inputOrderCachedTokens).toBe(0);
    // Sent again in the cached order, the input order already gets the whole prefix.
    const third = await r.rewriteChat({ messages: [{ role: "user", content: "Q3?" }], documents: docs("A", "B", "C"), ctxr: { conversation_id: "c3" } });
    expect(third.inputOrderCachedTokens).toBe(third.estimatedCachedTokens);
    expect(third.estimatedCachedTokens).toBeGreaterThan(second.estimatedCachedTokens);
  });

  test("received and forwarded prompts are counted by the given counter (the served model's tokenizer), the estimate otherwise", async () => {
    const service = await ContextService.open({ dataDir: null });
    services.push(service);
    const body = { messages: [{ role: "user", content: "Q?" }], documents: docs("A"), ctxr: { dedup: false, reorder: false } };
    const byCharacters = await new PromptRewriter(service, { countTokens: (text) => text.length }).rewriteChat(body);
    const rendered = userText(byCharacters.body, 0);
    expect(byCharacters.forwardedTokens).toBe(rendered.length);
    expect(byCharacters.receivedTokens).toBe(rendered.length);
    const estimated = await new PromptRewriter(service).rewriteChat(body);
    expect(estimated.forwardedTokens).toBe(Math.ceil(rendered.length / 4));
  });

  test("a later turn: history is byte-identical to what was forwarded, repeated documents become location notes", async () => {
    const r = await rewriter();
    const turn1Messages = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Context:\n[1] Paris is in France.\n[2] Rome is in Italy.\n[3] Oslo is in Norway.\n\nWhich is largest?" },
    ];
    const turn1 = await r.rewriteChat({ messages: turn1Messages });
    const forwardedUser1 = userText(turn1.body, 1);

    const turn2 = await r.rewriteChat({
      messages: [
        ...turn1Messages,
        { role: "assistant", content: "Paris." },
        { role: "user", content: "Context:\n[1] Rome is in Italy.\n[2] Bern is in Switzerland.\n\nAnd the smallest?" },
      ],
    });
    expect(userText(turn2.body, 1)).toBe(forwardedUser1);
    const newUser = userText(turn2.body, 3);
    const romeLabel = /\[(\d)\] Rome is in Italy/.exec(forwardedUser1)![1];
    expect(newUser).toBe(`Context:\n[1] Bern is in Switzerland.\n[2] Please refer to [Doc ${romeLabel}] in the previous conversation.\n\nAnd the smallest?`);
    expect(turn2.deduplicated).toBe(1);

    // Turn 3 repeats turn 2's history: the forwarded history stays byte-identical again.
    const turn3 = await r.rewriteChat({
      messages: [...(turn2.body.messages as object[]).slice(0, 0), ...turn1Messages, { role: "assistant", content: "Paris." }, { role: "user", content: "Context:\n[1] Rome is in Italy.\n[2] Bern is in Switzerland.\n\nAnd the smallest?" }, { role: "assistant", content: "Bern." }, { role: "user", content: "Thanks" }],
    });
    expect((turn3.body.messages as object[]).slice(0, 4)).toEqual((turn2.body.messages as object[]).slice(0, 4));
  });

  test("per-request switches: reorder false keeps the order, dedup false keeps repeated documents", async () => {
    const r = await rewriter();
    await r.rewriteChat({ messages: [{ role: "user", content: "x" }], documents: docs("A", "B"), ctxr: { conversation_id: "k" } });
    const noReorder = await r.rewriteChat({ messages: [{ role: "user", content: "y" }], documents: docs("C", "B", "A"), ctxr: { conversation_id: "other", reorder: false } });
    const text = userText(noReorder.body, 0);
    expect(text.indexOf('id="C"')).toBeLessThan(text.indexOf('id="B"'));
    expect(text).not.toContain("priority order");
    const noDedup = await r.rewriteChat({
      messages: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }, { role: "user", content: "z" }],
      documents: docs("A"),
      ctxr: { conversation_id: "k", dedup: false },
    });
    expect(userText(noDedup.body, 2)).toContain("A is a document about A.");
  });

  test("a repeated tool result becomes a note naming the earlier call", async () => {
    const r = await rewriter();
    const base = [{ role: "user", content: "look it up" }, { role: "assistant", content: null, tool_calls: [{ id: "call_1" }] }];
    await r.rewriteChat({ messages: [...base, { role: "tool", tool_call_id: "call_1", content: "Result: 42 widgets in stock." }], ctxr: { conversation_id: "t" } });
    const again = await r.rewriteChat({
      messages: [...base, { role: "tool", tool_call_id: "call_1", content: "Result: 42 widgets in stock." }, { role: "assistant", content: null, tool_calls: [{ id: "call_2" }] }, { role: "tool", tool_call_id: "call_2", content: "Result: 42 widgets in stock." }],
      ctxr: { conversation_id: "t" },
    });
    expect((again.body.messages as { content: string }[])[4]!.content).toBe("Please refer to [Tool result call_1] in the previous conversation.");
  });

  test("text in other forms passes through untouched; malformed ctxr or documents fields are client errors", async () => {
    const r = await rewriter();
    const body = { model: "m", messages: [{ role: "user", content: "Tell me about [1] things." }], temperature: 0.2 };
    expect((await r.rewriteChat(body)).body).toEqual(body);
    await expect(r.rewriteChat({ messages: [], ctxr: { reorder: "no" } })).rejects.toThrow("ctxr.reorder: must be true or false");
    await expect(r.rewriteChat({ messages: [], ctxr: { extra: 1 } })).rejects.toBeInstanceOf(RequestError);
    await expect(r.rewriteChat({ messages: [], documents: [{ title: "x" }] })).rejects.toThrow("documents[0].text: must be a string");
  });
});

describe("PromptRewriter.rewriteCompletion", () => {
  test("documents in the prompt are reordered against the live index", async () => {
    const r = await rewriter();
    await r.rewriteCompletion({ prompt: "<document>alpha</document>\n<document>beta</document>\nQ:" });
    const out = await r.rewriteCompletion({ prompt: "<document>gamma</document>\n<document>beta</document>\n<document>alpha</document>\nQ:", ctxr: {} });
    expect(out.body.prompt).toBe("<document>alpha</document>\n<document>beta</document>\n<document>gamma</document>\nPlease read the context in the following priority order: [Doc 3] > [Doc 2] > [Doc 1] and answer the question.\nQ:");
    expect(out.body.ctxr).toBeUndefined();
  });
});

describe("PromptRewriter commit", () => {
  test("an uncommitted turn (no engine took it) records nothing: its retry is rewritten afresh", async () => {
    const service = await ContextService.open({ dataDir: null });
    services.push(service);
    const r = new PromptRewriter(service);
    const body = { messages: [{ role: "user", content: "x" }], documents: docs("A", "B"), ctxr: { conversation_id: "retry" } };
    const failed = await r.rewriteChat(body);
    const retry = await r.rewriteChat(body);
    expect(retry.deduplicated).toBe(0);
    expect(userText(retry.body, 0)).toContain("A is a document about A.");
    retry.commit();
    // A retry of a delivered turn is forwarded exactly as before (no notes pointing at itself).
    const again = await r.rewriteChat(body);
    expect(userText(again.body, 0)).toBe(userText(retry.body, 0));
    expect(failed.deduplicated).toBe(0);
    // The next turn deduplicates against the delivered one.
    const next = await r.rewriteChat({ messages: [{ role: "user", content: "x" }, { role: "assistant", content: "ok" }, { role: "user", content: "y" }], documents: docs("B"), ctxr: { conversation_id: "retry" } });
    expect(userText(next.body, 2)).toContain("Please refer to [Doc");
  });
});
