/**
 * Engines on the tiny KV model (3 layers, seed 11), each behind a real server on an ephemeral
 * port, for one test file: call at the file's top level; the runner, the model and the context
 * service are set up in its beforeAll, and every engine opened is stopped in its afterAll.
 */
import { afterAll, beforeAll } from "bun:test";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { ContextService } from "../../src/online/contextService.ts";
import { startServer, type RunningServer } from "../../src/server/serve.ts";
import { client, type Client } from "../server/serverKit.ts";
import { buildRunner, tinyModelFolder } from "./engineKit.ts";

export type EngineOptions = Partial<Parameters<typeof GenerationEngine.open>[0]>;

export interface OpenedEngine {
  engine: GenerationEngine;
  api: Client;
  server: RunningServer;
}

/** `open(options)` starts an engine with `defaults` and then `options` over the common ones. */
export function tinyKvEngines(defaults: EngineOptions = {}): { open(options?: EngineOptions): Promise<OpenedEngine> } {
  let model: { path: string; cleanup(): void } | undefined;
  let runnerPath = "";
  let service: ContextService | undefined;
  const opened: { engine: GenerationEngine; server: RunningServer }[] = [];

  beforeAll(async () => {
    runnerPath = buildRunner();
    model = tinyModelFolder({ layers: 3, seed: 11 }, "tiny-kv");
    service = await ContextService.open({ dataDir: null });
  }, 300_000);

  afterAll(async () => {
    for (const { engine, server } of opened) {
      await server.stop(1000);
      await engine.close();
    }
    await service?.close();
    model?.cleanup();
  });

  return {
    async open(options: EngineOptions = {}): Promise<OpenedEngine> {
      const engine = await GenerationEngine.open({ model: model!.path, runner: runnerPath, kvBlocks: 256, threads: 2, ...defaults, ...options });
      const server = startServer(service!, { host: "127.0.0.1", port: 0, engine, log: () => {} });
      opened.push({ engine, server });
      return { engine, api: client(server.url), server };
    },
  };
}
