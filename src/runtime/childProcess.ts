/** Child processes: one spawned with its three standard streams piped, a command run to its end, PATH lookup. */
import { bunChildProcesses } from "./bun/childProcess.ts";
import { denoChildProcesses } from "./deno/childProcess.ts";
import { runtimeName } from "./runtimeName.ts";
import type { ChildProcesses } from "./childProcessTypes.ts";
export type { PipedChild, CommandResult, SpawnOptions, ChildProcesses } from "./childProcessTypes.ts";

const childProcesses: ChildProcesses = runtimeName === "bun" ? bunChildProcesses : denoChildProcesses;

export const spawnPiped = childProcesses.spawnPiped;
export const runSync = childProcesses.runSync;
export const which = childProcesses.which;
export const scriptCommand = childProcesses.scriptCommand;
