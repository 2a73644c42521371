/**
 * `bun test/security/healthzWatcher.ts URL [everyMs]` (or deno run -A): polls URL/healthz until its stdin closes,
 * then prints {"maxMs", "samples", "failures"}: the longest answer time. Run as a process of its
 * own (kvEventsHostileKit.ts's watchHealthz) so that the prober's own work (building and writing
 * hundreds of MB) does not show as the server's stall.
 */
import { sleep } from "../../src/runtime/sleep.ts";

const [url, every] = process.argv.slice(2);
const everyMs = Number(every ?? 20);
let running = true;
let maxMs = 0;
let samples = 0;
let failures = 0;
(async () => {
  for await (const _ of process.stdin) {
    // Nothing is sent: the stream ends when the parent closes stdin.
  }
  running = false;
})();
while (running) {
  const started = performance.now();
  try {
    const answer = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(30_000) });
    await answer.arrayBuffer();
    if (answer.status !== 200) failures++;
  } catch {
    failures++;
  }
  maxMs = Math.max(maxMs, performance.now() - started);
  samples++;
  await sleep(everyMs);
}
process.stdout.write(`${JSON.stringify({ maxMs, samples, failures })}\n`);
