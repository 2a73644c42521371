/**
 * Engines on the tiny KV model (3 layers, seed 11), each an in-process `serve --model` on an
 * ephemeral port (serverKit's startEngineServer), for one test file: call at the file's top level;
 * the model folder is written in its beforeAll, and every engine opened is closed in its afterAll.
 */
import { afterAll, beforeAll } from "bun:test";
import type { GenerationEngine } from "../../src/engine/generationEngine.ts";
import type { RunningServer } from "../../src/server/serve.ts";
import { startEngineServer, type Client, type EngineTestServer } from "../server/serverKit.ts";
import { buildRunner, tinyModelFolder } from "./engineKit.ts";

export type EngineOptions = NonNullable<Parameters<typeof startEngineServer>[1]>;

export interface OpenedEngine {
  engine: GenerationEngine;
  api: Client;
  server: RunningServer;
}

/** `open(options)` starts an engine with `defaults` and then `options` over startEngineServer's. */
export function tinyKvEngines(defaults: EngineOptions = {}): { open(options?: EngineOptions): Promise<OpenedEngine> } {
  let model: { path: string; cleanup(): void } | undefined;
  const opened: EngineTestServer[] = [];

  beforeAll(() => {
    buildRunner(); // built here, under this hook's timeout, not in the first test's
    model = tinyModelFolder({ layers: 3, seed: 11 }, "tiny-kv");
  }, 300_000);

  afterAll(async () => {
    for (const server of opened) await server.close();
    model?.cleanup();
  });

  return {
    async open(options: EngineOptions = {}): Promise<OpenedEngine> {
      const started = await startEngineServer(model!.path, { ...defaults, ...options });
      opened.push(started);
      return { engine: started.engine, api: started, server: started.server };
    },
  };
}
