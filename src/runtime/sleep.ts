/** Waiting: a promise that resolves after `ms` milliseconds. */
import { bunSleep } from "./bun/sleep.ts";
import { denoSleep } from "./deno/sleep.ts";
import { runtimeName } from "./runtimeName.ts";

export const sleep: (ms: number) => Promise<void> = runtimeName === "bun" ? bunSleep : denoSleep;
