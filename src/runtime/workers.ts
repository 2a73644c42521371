/**
 * Worker threads: web Workers running an ES module on both runtimes, with Bun's extras where the
 * owners rely on them. Bun fires "close" when a worker has exited, also after terminate(); Deno
 * fires nothing, so its twin fires "close" after terminate() itself (an owner that terminates a
 * worker it still counts on learns that it is gone either way). Bun's unref (the thread does not
 * keep the process alive) has no Deno equivalent: there a worker keeps the process running until
 * its owner closes it, which every owner does on close().
 */
import { bunUnrefWorker } from "./bun/workers.ts";
import { denoStartModuleWorker } from "./deno/workers.ts";
import { runtimeName } from "./runtimeName.ts";

export const startModuleWorker: (entry: string) => Worker = runtimeName === "bun" ? (entry) => new Worker(entry, { type: "module" }) : denoStartModuleWorker;

export const unrefWorker: (worker: Worker) => void = runtimeName === "bun" ? bunUnrefWorker : () => {};
