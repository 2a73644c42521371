/** The upstream probes in process: a hanging upstream, and passive failures against readiness. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startFakeUpstream, type FakeUpstream } from "./fakeUpstream.ts";
import { startProxy, waitFor } from "./proxyKit.ts";
import { vllmEndpoints } from "./fakeEngineEndpoints.ts";

let fake: FakeUpstream;
beforeAll(async () => {
  fake = await startFakeUpstream();
});
afterAll(async () => fake.stop());

describe("UpstreamMonitor", () => {
  test("an upstream that does not answer within the probe's time limit is not serving; it is detected once it answers", async () => {
    fake.hang();
    const ctxr = await startProxy({ upstreams: [fake.url], engine: "auto", probeIntervalMs: 100, probeTimeoutMs: 200 });
    try {
      await waitFor(() => ctxr.logs.some((line) => line.includes("no answer within 0.2 s")), 5000);
      expect(ctxr.logs.join("")).toContain(`ctxr serve: upstream ${fake.url}: not reachable (no answer within 0.2 s); its engine is detected when it answers`);
      const ready = await ctxr.get("/ready");
      expect(ready.status).toBe(503);
      fake.recover();
      fake.custom(vllmEndpoints("0.9.2"));
      await waitFor(() => ctxr.logs.some((line) => line.includes("vLLM 0.9.2 detected")), 5000);
      expect((await ctxr.get("/ready")).status).toBe(200);
    } finally {
      await ctxr.close();
      fake.recover();
    }
  }, 20_000);

  test("without probes (the library default), readiness follows routing failures", async () => {
    const gone = await startFakeUpstream();
    const ctxr = await startProxy({ upstreams: [gone.url], backoffMs: 60_000 });
    try {
      expect((await ctxr.get("/ready")).status).toBe(200);
      await gone.stop();
      expect((await ctxr.post("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "x" }] })).status).toBe(502);
      const ready = await ctxr.get("/ready");
      expect({ status: ready.status, serving: ready.body.upstreams[0].serving }).toEqual({ status: 503, serving: false });
      expect(ready.body.reason).toContain("out of rotation after a failure");
    } finally {
      await ctxr.close();
    }
  });
});
