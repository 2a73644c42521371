/**
 * A real engine and HTTP server publishing KV events, with a libzmq SUB socket subscribed to them
 * (ready once the publisher counts it): the set-up of the KV-event tests. Each part's close goes
 * to `cleanups`, to run in reverse order after the tests.
 */
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import type { ContextService } from "../../src/online/contextService.ts";
import { KvEventPublisher, parseKvEventsPublish } from "../../src/server/kvEventPublisher.ts";
import { startServer, type RunningServer } from "../../src/server/serve.ts";
import { client, type Client } from "../server/serverKit.ts";
import { buildRunner } from "./engineKit.ts";
import { ZmqPeer } from "./zmqPeer.ts";

export interface KvEventsEngine {
  engine: GenerationEngine;
  publisher: KvEventPublisher;
  server: RunningServer;
  api: Client;
  peer: ZmqPeer;
}

export async function openKvEventsEngine(
  service: ContextService,
  model: string,
  options: Partial<Parameters<typeof GenerationEngine.open>[0]>,
  cleanups: (() => Promise<void> | void)[],
  publish = "tcp://127.0.0.1:0,replay=tcp://127.0.0.1:0",
): Promise<KvEventsEngine> {
  const publisher = await KvEventPublisher.open(parseKvEventsPublish(publish));
  cleanups.push(() => publisher.close());
  const engine = await GenerationEngine.open({ model, runner: buildRunner(), kvBlocks: 256, threads: 2, prefixEvents: publisher, ...options });
  cleanups.push(() => engine.close());
  const server = startServer(service, { host: "127.0.0.1", port: 0, engine, kvEvents: publisher, log: () => {} });
  cleanups.push(() => server.stop(1000));
  const peer = await ZmqPeer.subscribe(publisher.endpoint);
  cleanups.push(() => peer.close());
  while (publisher.stats.subscribers === 0) await Bun.sleep(10);
  return { engine, publisher, server, api: client(server.url), peer };
}
