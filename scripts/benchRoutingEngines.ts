/**
 * The fake engines of scripts/bench-routing.ts, in a process of their own so that neither the
 * proxy's event loop nor the load generator's shares theirs:
 *
 *   bun scripts/benchRoutingEngines.ts --engines 4 --block-size 16 --capacity-blocks N
 *     --tokenizer DIR [--prefill-ms-per-token X] [--engine-load] [--layouts map,array,mixed,map] [--no-kv-events]
 *
 * `--engine-load`: the fake engine's load model (engineLoad.ts, DEFAULT_ENGINE_LOAD with prefill
 * `--prefill-ms-per-token`): prefills queued and decode steps shared by the requests in flight.
 *
 * prints `engines {"urls": […], "kvEvents": […], "control": URL}` once they listen. GET
 * CONTROL/stats answers each engine's requests, prompt and cached tokens and cached blocks.
 */
import { parseArgs } from "node:util";
import type { KvEventLayout } from "../src/kv/kvEventBatch.ts";
import { FakeEngine } from "../test/helpers/fakeEngine/fakeEngine.ts";

export interface EngineFigures {
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  blocks: number;
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      engines: { type: "string", default: "4" },
      "block-size": { type: "string", default: "16" },
      "capacity-blocks": { type: "string", default: "4096" },
      tokenizer: { type: "string" },
      "prefill-ms-per-token": { type: "string", default: "0" },
      "engine-load": { type: "boolean" },
      layouts: { type: "string", default: "map,array,mixed,map" },
      "no-kv-events": { type: "boolean" },
    },
  });
  const layouts = values.layouts!.split(",") as KvEventLayout[];
  const engines = await Promise.all(
    Array.from({ length: Number(values.engines) }, (_, i) =>
      FakeEngine.start({
        blockSize: Number(values["block-size"]),
        capacityBlocks: Number(values["capacity-blocks"]),
        ...(values.tokenizer !== undefined ? { tokenizerDir: values.tokenizer } : {}),
        prefillMsPerToken: Number(values["prefill-ms-per-token"]),
        load: values["engine-load"] ? { prefillMsPerToken: Number(values["prefill-ms-per-token"]) } : null,
        seed: `bench-engine-${i}`,
        kvEvents: values["no-kv-events"] ? null : { layout: layouts[i % layouts.length]!, hashes: i % 2 === 0 ? "bytes" : "int" },
      }),
    ),
  );
  const control = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: () => Response.json(engines.map((e): EngineFigures => ({ ...e.stats, blocks: e.blocks.size }))),
  });
  process.stdout.write(`engines ${JSON.stringify({ urls: engines.map((e) => e.url), kvEvents: engines.map((e) => (e.kvEventsEndpoint === null ? "none" : e.kvEventsFlag)), control: `http://127.0.0.1:${control.port}` })}\n`);
  process.on("SIGTERM", () => {
    void Promise.all(engines.map((e) => e.close())).then(() => process.exit(0));
  });
}
