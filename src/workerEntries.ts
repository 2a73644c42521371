/**
 * Worker threads' entry files, as paths from the repository root. The single binary must be built
 * with each as an entry point of its own (scripts/build-binary.ts), and inside it a worker is named
 * by exactly this path.
 */
export const KV_EVENTS_WORKER_ENTRY = "./src/proxy/kvEventsWorker.ts";

export const KV_EVENTS_PUBLISH_WORKER_ENTRY = "./src/server/kvEventsPublishWorker.ts";

export const QUANTIZE_WORKER_ENTRY = "./src/model/gguf/quantizeWorker.ts";

export const GRAMMAR_WORKER_ENTRY = "./src/engine/grammar/grammarWorker.ts";

export const TOKENIZER_WORKER_ENTRY = "./src/model/tokenizerThread/tokenizerWorker.ts";

export const WORKER_ENTRIES = [KV_EVENTS_WORKER_ENTRY, KV_EVENTS_PUBLISH_WORKER_ENTRY, QUANTIZE_WORKER_ENTRY, GRAMMAR_WORKER_ENTRY, TOKENIZER_WORKER_ENTRY];

/** Whether this code runs inside the single binary (its files live under Bun's /$bunfs/). */
export function insideSingleBinary(): boolean {
  return import.meta.url.includes("/$bunfs/");
}
