/** What tests that open sockets and servers share: cleanups run after each test, and waiting for a condition. */
import { afterEach } from "bun:test";
import { sleep } from "../../src/runtime/sleep.ts";

/** Registers the calling file's cleanups: each added one runs after the current test, last added first. */
export function cleanupAfterEach(): (cleanup: () => Promise<unknown> | unknown) => void {
  const cleanups: (() => Promise<unknown> | unknown)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  return (cleanup) => void cleanups.push(cleanup);
}

/** Resolves once `condition` holds (checked every `everyMs`); throws naming `what` after `timeoutMs`. */
export async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000, everyMs = 5): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}
