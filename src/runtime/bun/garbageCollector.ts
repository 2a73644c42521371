export function bunCollectGarbage(): void {
  Bun.gc(true);
}
