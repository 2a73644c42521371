import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestServer } from "./serverKit.ts";

test("when the journal can no longer write, changes fail with 500 and /healthz answers 503", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ctxr-failing-"));
  const server = await startTestServer({ service: { dataDir: dir } });
  try {
    expect((await server.post("/v1/reorder", { contexts: [[1, 2]] })).status).toBe(200);
    expect((await server.get("/healthz")).status).toBe(200);
    expect((await server.get("/health")).text).toBe("");
    expect((await server.get("/ready")).body).toEqual({ status: "ready" });
    // Close the journal underneath the service: every later append is refused, as after a disk failure.
    await (server.service as unknown as { journal: { journal: { close(): Promise<void> } } }).journal.journal.close();
    const write = await server.post("/v1/reorder", { contexts: [[3, 4]] });
    expect(write.status).toBe(500);
    const health = await server.get("/healthz");
    expect(health.status).toBe(503);
    expect(health.body.status).toBe("failing");
    expect(health.body.error).toContain("journal write failed");
    // vLLM's /health too: 503 with the reason (200 with an empty body before).
    const vllmHealth = await server.get("/health");
    expect(vllmHealth.status).toBe(503);
    expect(vllmHealth.body.error.message).toContain("journal write failed");
    // And readiness: nothing can be made durable, so not ready.
    const ready = await server.get("/ready");
    expect(ready.status).toBe(503);
    expect(ready.body.status).toBe("not_ready");
    expect(ready.body.reason).toContain("journal write failed");
  } finally {
    await server.server.stop(1000);
    rmSync(dir, { recursive: true, force: true });
  }
});
