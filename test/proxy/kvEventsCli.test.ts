/**
 * `ctxr serve --upstream URL --kv-events tcp://…` as a user runs it (a spawned `bun
 * src/cli/main.ts serve`) in front of fake engines that publish KV events: the flag's checks, the
 * startup lines, the subscriber's counters in /v1/stats and /metrics, and a clean stop.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { cleanupAfterEach, until } from "../helpers/testLifecycle.ts";
import { runCli } from "../helpers/cli.ts";
import { FakeEngine } from "../helpers/fakeEngine/fakeEngine.ts";
import { spawnServer } from "../server/serverKit.ts";
import { tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(60_000);

const cleanup = cleanupAfterEach();

describe("ctxr serve --kv-events", () => {
  test("bad values, a count that does not match the upstreams, or no upstream are usage errors naming the flag", () => {
    const cases: [string[], string][] = [
      [["--upstream", "http://a", "--kv-events", "localhost:5557"], "--kv-events: 'localhost:5557' is not a tcp://HOST:PORT endpoint"],
      [["--upstream", "http://a", "--kv-events", "tcp://*:5557"], "--kv-events: 'tcp://*:5557': a socket that connects needs a host, not *"],
      [["--upstream", "http://a", "--kv-events", "tcp://h:5557,replay=tcp://h:0"], "needs a port, not 0"],
      [["--upstream", "http://a", "--kv-events", "tcp://h:5557,hashes=int"], "--kv-events: unknown setting 'hashes=int' (expected replay= or topic=)"],
      [["--upstream", "http://a", "--upstream", "http://b", "--kv-events", "tcp://h:1"], "give one --kv-events per --upstream, in the same order ('none' for an upstream without events): 2 --upstream, 1 --kv-events"],
      [["--kv-events", "tcp://h:1"], "--kv-events needs --upstream"],
      [["--kv-overlap-weight", "2"], "--kv-overlap-weight needs --upstream"],
      [["--upstream", "http://a", "--kv-overlap-weight", "-1"], "--kv-overlap-weight"],
      [["--upstream", "http://a", "--kv-events-max-bytes", "1MiB"], "--kv-events-max-bytes needs --kv-events"],
      [["--upstream", "http://a", "--kv-events", "tcp://h:1", "--kv-events-max-bytes", "0"], "--kv-events-max-bytes"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(message);
    }
    expect(runCli(["serve", "--help"]).stdout).toContain("--kv-events E");
    const noEvents = runCli(["serve", "--in-memory", "--upstream", "http://a", "--tokenizer", "/nowhere"]);
    expect(noEvents.code).toBe(2);
    expect(noEvents.stderr).toContain("--tokenizer counts the prompt blocks engines report in their KV events: it needs --kv-events");
    const missing = runCli(["serve", "--in-memory", "--upstream", "http://a", "--kv-events", "tcp://h:1", "--tokenizer", "/nowhere"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("--tokenizer /nowhere:");
  });

  test("--tokenizer: a request goes to the engine whose events show its prompt cached, and that engine reports the hit", async () => {
    const model = tinyModelFolder({ layers: 1 }, "tiny-route-cli");
    cleanup(() => model.cleanup());
    const engines = [
      await FakeEngine.start({ blockSize: 4, tokenizerDir: model.path, kvEvents: { layout: "map", hashes: "bytes" } }),
      await FakeEngine.start({ blockSize: 4, tokenizerDir: model.path, kvEvents: { layout: "array", hashes: "int" } }),
    ];
    for (const engine of engines) cleanup(() => engine.close());
    const server = await spawnServer(["--in-memory", ...engines.flatMap((e) => ["--upstream", e.url, "--kv-events", e.kvEventsFlag]), "--tokenizer", model.path, "--block-size", "4"]);
    cleanup(async () => {
      server.kill("SIGTERM");
      await server.exited;
    });
    await until(async () => engines.every((e) => e.kvEvents.stats.subscribers === 1), "the subscriptions");
    // The second engine (listed last, so it loses ties) answered this chat before.
    const body = { messages: [{ role: "user", content: "Tell me about the mill by the river, and the long winter floods." }], max_tokens: 4 };
    expect((await fetch(`${engines[1]!.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })).status).toBe(200);
    engines[1]!.kvEvents.flush();
    const synced = async () => ((await (await fetch(`${server.url}/v1/stats`)).json()) as { upstreams: any[] }).upstreams[1].kv_events.blocks;
    await until(async () => (await synced()) === engines[1]!.blocks.size, "the second engine's blocks");
    const before = engines.map((e) => e.stats.requests);
    const answer = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const usage = ((await answer.json()) as { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } }).usage;
    expect(engines.map((e, i) => e.stats.requests - before[i]!)).toEqual([0, 1]);
    expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(usage.prompt_tokens - 4);
  });

  test("follows each upstream's events (none for one of them); /v1/stats and /metrics show the subscriber's counters; SIGTERM stops it", async () => {
    const engine = await FakeEngine.start({ blockSize: 4, kvEvents: { layout: "mixed", hashes: "int" } });
    cleanup(() => engine.close());
    const other = await FakeEngine.start({ blockSize: 4 });
    cleanup(() => other.close());
    const server = await spawnServer(["--in-memory", "--upstream", engine.url, "--upstream", other.url, "--kv-events", engine.kvEventsFlag, "--kv-events", "none"]);
    cleanup(async () => {
      server.kill("SIGTERM");
      await server.exited;
    });
    expect(server.startLines).toContain(`ctxr serve: following the KV events of ${engine.url} from ${engine.kvEventsEndpoint} (replay: ${engine.replayEndpoint})`);
    await until(async () => engine.kvEvents.stats.subscribers === 1, "the subscription");
    // Stored in the engine before any request: the connection's replay brings it.
    engine.process(engine.promptIds("The engine held this prompt before ctxr asked anything of it."));
    engine.kvEvents.flush();
    const upstreams = async () => ((await (await fetch(`${server.url}/v1/stats`)).json()) as { upstreams: any[] }).upstreams;
    await until(async () => (await upstreams())[0].kv_events?.subscriber?.batches === 1, "the first batch");
    const [followed, unfollowed] = await upstreams();
    expect(followed.kv_events.subscriber).toMatchObject({
      endpoint: engine.kvEventsEndpoint,
      replay_endpoint: engine.replayEndpoint,
      connections: 1,
      batches: 1,
      gaps: 0,
      resyncs: 0,
      malformed: {},
      layout: "mixed",
    });
    expect(followed.kv_events.blocks).toBe(engine.blocks.size);
    expect(followed.kv_events.connected).toBe(true);
    expect(unfollowed.kv_events).toBeUndefined();
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toContain(`ctxr_upstream_kv_event_batches_total{upstream="${engine.url}"} 1\n`);
    expect(metrics).toContain(`ctxr_upstream_kv_event_resyncs_total{upstream="${engine.url}"} 0\n`);
    expect(metrics).not.toContain(`ctxr_upstream_kv_event_batches_total{upstream="${other.url}"}`);
    server.kill("SIGTERM");
    expect(await server.exited).toBe(0);
    expect(server.stderr()).not.toContain("KV events from");
  });
});
