export function denoCollectGarbage(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

export function denoHeapBytes(): number {
  return process.memoryUsage().heapUsed;
}
