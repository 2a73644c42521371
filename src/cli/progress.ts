/**
 * A progress bar on stderr for long builds: started lazily, only once a build has
 * run for `delayMs`, and only when stderr is a terminal (stdout is never touched).
 */
import { SingleBar } from "cli-progress";

export interface LazyProgress {
  onProgress(phase: string, done: number, total: number): void;
  stop(): void;
}

export function lazyProgressBar(enabled: boolean, delayMs = 1000): LazyProgress {
  const started = performance.now();
  let bar: SingleBar | undefined;
  let phase = "";
  let total = 0;
  return {
    onProgress(name: string, done: number, newTotal: number): void {
      if (!enabled) return;
      if (!bar) {
        if (performance.now() - started < delayMs) return;
        bar = new SingleBar({
          stream: process.stderr,
          format: "{phase} [{bar}] {percentage}% | {value}/{total} | {duration_formatted}",
          barsize: 30,
          hideCursor: false, // a build interrupted by Ctrl-C must not leave the cursor hidden
          clearOnComplete: true,
          stopOnComplete: false,
        });
        bar.start(newTotal, done, { phase: name });
        phase = name;
        total = newTotal;
        return;
      }
      if (name !== phase || newTotal !== total) {
        phase = name;
        total = newTotal;
        bar.setTotal(newTotal);
      }
      bar.update(done, { phase: name });
    },
    stop(): void {
      if (bar) {
        bar.stop();
        bar = undefined;
      }
    },
  };
}
