/**
 * Which JavaScript runtime this process runs on. Each adapter in src/runtime/ picks its Bun or its
 * Deno implementation by this, once, when it is loaded; nothing outside src/runtime/ asks.
 */
export type RuntimeName = "bun" | "deno";

export const runtimeName: RuntimeName = typeof Bun !== "undefined" ? "bun" : "Deno" in globalThis ? "deno" : unsupported();

function unsupported(): never {
  throw new Error("ctxr runs on Bun or Deno (this runtime is neither)");
}
