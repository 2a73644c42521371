export function bunCollectGarbage(): void {
  Bun.gc(true);
}

export function bunHeapBytes(): number {
  // require: Deno refuses a static import of the bun: scheme even in a file it never runs.
  return (require("bun:jsc") as typeof import("bun:jsc")).heapSize();
}
