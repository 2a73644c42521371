export function denoCollectGarbage(): void {
  (globalThis as { gc?: () => void }).gc?.();
}
