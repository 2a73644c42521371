import { sleep } from "./sleep.ts";

/** Waits until every promise settles, or `limitMs` passes (null: no limit); never throws. */
export async function settleWithin(promises: Promise<unknown>[], limitMs: number | null): Promise<void> {
  if (promises.length === 0) return;
  const all = Promise.allSettled(promises);
  if (limitMs === null) await all;
  else await Promise.race([all, sleep(limitMs)]);
}
