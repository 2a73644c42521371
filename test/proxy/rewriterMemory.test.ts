import { describe, expect, test } from "bun:test";
import { ContextService } from "../../src/online/contextService.ts";
import { PromptRewriter } from "../../src/proxy/promptRewriter.ts";
import { collectGarbage, heapBytes } from "../../src/runtime/garbageCollector.ts";

describe("the proxy's rewriting keeps no more than its budgets", () => {
  test("200 conversations of 2 MB messages with documents: the live heap stays within the history budget", async () => {
    const budget = 16 * 1024 * 1024;
    const service = await ContextService.open({ dataDir: null });
    const rewriter = new PromptRewriter(service, { maxHistoryBytes: budget });
    const filler = "lorem ipsum ".repeat(170_000);
    collectGarbage();
    const before = heapBytes();
    for (let i = 0; i < 200; i++) {
      const documents = Array.from({ length: 8 }, (_, d) => `<document id="d${i}-${d}">\ndocument ${i} ${d} ${"z".repeat(500)}\n</document>`).join("\n");
      // Parsed from JSON as the server does: flat strings, so a document is a slice of its message.
      const body = JSON.parse(JSON.stringify({ model: "m", messages: [{ role: "system", content: "terse" }, { role: "user", content: documents + filler }], ctxr: { conversation_id: `c${i}` } }));
      const result = await rewriter.rewriteChat(body);
      expect(result.documents).toBe(8);
      result.commit();
    }
    collectGarbage();
    collectGarbage();
    expect(rewriter.histories.bytes).toBeLessThanOrEqual(budget);
    // The histories take at most their (conservative) estimate; anything that pinned messages would hold ~400 MB.
    expect(heapBytes() - before).toBeLessThan(budget + 24 * 1024 * 1024);
    await service.close();
    // A memory test, not a timed one: 400 MB of messages take seconds on a loaded machine.
  }, 60_000);
});
