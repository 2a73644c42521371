/** Shared by the shared-state suites: waiting for a replica to catch up, and reading its figures. */
import { expect } from "bun:test";
import type { SpawnedServer } from "../server/serverKit.ts";

/** Polls `probe` every 25 ms until it gives a value (not null, undefined or false); fails after timeoutMs. */
export async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null && value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(25);
  }
}

/** The server's /v1/stats body. */
export async function stats(server: SpawnedServer) {
  const answer = await server.get("/v1/stats");
  expect(answer.status).toBe(200);
  return answer.body;
}
