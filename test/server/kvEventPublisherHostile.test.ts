/**
 * A connection flood against `ctxr serve --model DIR --kv-events-publish …` with default flags
 * (issue 27, item 8): 19,990 idle connections used to take every file descriptor, and /healthz
 * and completions timed out. The server runs in a child process; while 3,000 connections that
 * never speak ZMTP are opened to its PUB socket, /healthz is timed, a completion is asked for and
 * the server's open descriptors are counted. Then the idle connections are closed by the handshake
 * deadline and a real libzmq subscriber follows the events.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readdirSync } from "node:fs";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";
import { until } from "../helpers/testLifecycle.ts";
import { startCtxr, type Ctxr } from "../security/hostileKit.ts";
import { floodConnections, watchHealthz } from "../security/kvEventsHostileKit.ts";
import { DEFAULT_HANDSHAKE_TIMEOUT_MS, DEFAULT_MAX_PEERS } from "../../src/zmq/zmqSockets.ts";

setDefaultTimeout(180_000);

const STALL_LIMIT_MS = 500;
const FLOOD = 3000;

let model: ReturnType<typeof tinyModelFolder>;

beforeAll(() => {
  buildRunner();
  model = tinyModelFolder({ layers: 1, seed: 27 }, "tiny-publisher-flood");
}, 300_000);

afterAll(() => model?.cleanup());

const openDescriptors = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;
const metric = (text: string, name: string) => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(text)?.[1] ?? NaN);

describe("ctxr serve --kv-events-publish under a connection flood", () => {
  test(`${FLOOD} idle connections: at most ${DEFAULT_MAX_PEERS} held, the rest closed at once, the held ones after the handshake deadline; /healthz and completions answer throughout`, async () => {
    const ctxr: Ctxr = await startCtxr(["--model", model.path, "--kv-blocks", "64", "--threads", "1", "--kv-events-publish", "tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0"]);
    try {
      const line = ctxr.startLines.find((l) => l.startsWith("ctxr serve: publishing KV events on "));
      const match = /on tcp:\/\/127\.0\.0\.1:(\d+) \(replay: tcp:\/\/127\.0\.0\.1:(\d+)\)$/.exec(line ?? "");
      expect(match).not.toBeNull();
      const [pubPort, replayPort] = [Number(match![1]), Number(match![2])];
      const descriptorsBefore = openDescriptors(ctxr.pid);
      const healthz = watchHealthz(ctxr.url);
      const flooded = await Promise.all([floodConnections(pubPort, FLOOD), floodConnections(replayPort, FLOOD / 3)]);
      let descriptorsDuring = openDescriptors(ctxr.pid);
      const completion = await ctxr.post("/v1/completions", { prompt: "The mill by the river", max_tokens: 2, temperature: 0 });
      descriptorsDuring = Math.max(descriptorsDuring, openDescriptors(ctxr.pid));
      expect(completion.status).toBe(200);
      // Every connection over the cap is closed as it comes, on both sockets.
      await until(() => flooded[0].closed() >= FLOOD - DEFAULT_MAX_PEERS && flooded[1].closed() >= FLOOD / 3 - DEFAULT_MAX_PEERS, "the connections over the cap closed", 20_000, 20);
      expect(descriptorsDuring - descriptorsBefore).toBeLessThanOrEqual(2 * DEFAULT_MAX_PEERS + 16);
      // The held ones never greet: closed at the handshake deadline.
      await until(() => flooded[0].closed() === FLOOD && flooded[1].closed() === FLOOD / 3, "every idle connection closed", DEFAULT_HANDSHAKE_TIMEOUT_MS + 15_000, 50);
      const stall = await healthz.stop();
      expect(stall.failures).toBe(0);
      expect(stall.maxMs).toBeLessThan(STALL_LIMIT_MS);
      const metrics = await (await fetch(`${ctxr.url}/metrics`)).text();
      expect(metric(metrics, "ctxr_kv_events_refused_connections_total")).toBe(FLOOD + FLOOD / 3 - 2 * DEFAULT_MAX_PEERS);
      expect(metric(metrics, "ctxr_kv_events_handshake_timeouts_total")).toBe(2 * DEFAULT_MAX_PEERS);
      for (const { sockets } of flooded) for (const socket of sockets) socket.destroy();

      // A real subscriber follows the events after the flood.
      const peer = await ZmqPeer.subscribe(`tcp://127.0.0.1:${pubPort}`);
      try {
        await until(async () => (await (await fetch(`${ctxr.url}/metrics`)).text()).includes("ctxr_kv_events_subscribers 1\n"), "the subscriber", 10_000, 50);
        expect((await ctxr.post("/v1/completions", { prompt: "x".repeat(40), max_tokens: 1, temperature: 0 })).status).toBe(200);
        expect((await peer.take("message", 1)).length).toBe(1);
      } finally {
        await peer.close();
      }
    } finally {
      await ctxr.stop();
    }
  });
});
