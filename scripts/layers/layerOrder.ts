/**
 * The layers of src/, bottom to top. A file may import from its own layer and from layers below
 * it, never from one above. A layer is a top-level folder of src/, or a file directly in src/
 * named without its extension. This list is the one place the order is written down; the
 * README's layout section shows it and scripts/check-layers.ts enforces it.
 */
export const LAYER_ORDER: readonly string[] = [
  // leaves: no imports from other layers
  "runtime",
  "files",
  "collections",
  "workerEntries",
  "version",
  "kernels",
  "zmq",
  // shared HTTP pieces: error bodies, limits, JSON depth, idle timeouts, SSE keep-alive, Prometheus text
  "http",
  // the token accounts of what ctxr saved, which the engine and the proxy feed
  "accounting",
  // the context index, the online reordering service and its conversation stores, state shared through Redis
  "index",
  "online",
  "state",
  // the built-in engine: model files and tokenizers; chat messages and the documents field as both
  // the engine and the proxy read them; the runner process, KV caches, answer quality under reuse
  // (its definitions of agreement, which the engine's live audit uses), generation
  "model",
  "chat",
  "runner",
  "kv",
  "quality",
  "engine",
  // the proxy in front of OpenAI-compatible engines, the HTTP server, the CLI
  "proxy",
  "server",
  "cli",
];
