#!/usr/bin/env bun
/** Entry point of the ctxr binary (`bun build --compile` starts here). */
import { runCli } from "./cli.ts";

process.exitCode = await runCli(process.argv.slice(2));
