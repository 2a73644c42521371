/**
 * The ctxr command line: global flags, dispatch to one command per file, and the
 * mapping of errors to messages and exit codes (2: usage or input, 1: failure).
 */
import { ContextsJsonlError } from "../index/contextsJsonl.ts";
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, InputError, UsageError } from "./args.ts";
import { INDEX_BUILD_HELP, indexBuildCommand } from "./commands/indexBuild.ts";
import { CALIBRATE_SPARSE_HELP, calibrateSparseCommand } from "./commands/calibrateSparse.ts";
import { MODEL_HELP, MODEL_TINY_HELP, modelTinyCommand } from "./commands/model.ts";
import { MODEL_QUANTIZE_HELP, modelQuantizeCommand } from "./commands/modelQuantize.ts";
import { MODEL_PULL_HELP, modelPullCommand } from "./commands/modelPull.ts";
import { serveCommand } from "./commands/serve.ts";
import { SERVE_HELP } from "./commands/serveHelp.ts";
import { SIMULATE_HELP, simulateCommand } from "./commands/simulate.ts";
import { REUSE_CALIBRATE_HELP, REUSE_HELP, reuseCalibrateCommand } from "./commands/reuseCalibrate.ts";
import type { Command, CommandIo } from "./commands/types.ts";
import { VERSION } from "../version.ts";

export const MAIN_HELP = `ctxr ${VERSION}: context reuse for long-context LLM inference

Usage: ctxr <command> [options]

Commands:
  index build    reorder and schedule contexts for prefix-cache reuse (JSONL in, JSONL out)
  simulate       prefix-cache hit ratio of a request sequence (JSONL)
  serve          an HTTP server in one of three modes:
                   ctxr serve                  the context-reuse API (reorder, dedup, ...)
                   ctxr serve --upstream URL   a proxy in front of vLLM, SGLang, llama.cpp
                                               or any OpenAI-compatible API
                   ctxr serve --model FILE.gguf|DIR
                                               a built-in engine, OpenAI-compatible
  model pull     download a model from the Hugging Face Hub by name (hf:ORG/REPO[:QUANT])
  model tiny     write a deterministic tiny Llama checkpoint (tests, smoke runs, benchmarks)
  model calibrate-sparse
                 calibrate sparse decode's trigger thresholds for ctxr serve --model
  model quantize write a model folder or GGUF file as a GGUF file (f16, q8_0, q4_k, ...)
  reuse calibrate
                 the smallest recompute ratio per policy meeting an agreement target

Global options:
  -h, --help     show help (also: ctxr <command> --help)
  -V, --version  print the version

Run 'ctxr <command> --help' for a command's options. The options of serve, index
build and simulate can also be set as CTXR_<OPTION> environment variables or in a
--config FILE (JSON or YAML).
`;

const INDEX_HELP = `Usage: ctxr index <subcommand> [options]

Subcommands:
  build          reorder and schedule contexts (see 'ctxr index build --help')
`;

interface CommandEntry {
  run: Command;
  help: string;
}

/** Commands by their words ("index build"); add new commands here. */
const COMMANDS: Record<string, CommandEntry> = {
  "index build": { run: indexBuildCommand, help: INDEX_BUILD_HELP },
  simulate: { run: simulateCommand, help: SIMULATE_HELP },
  serve: { run: serveCommand, help: SERVE_HELP },
  "model pull": { run: modelPullCommand, help: MODEL_PULL_HELP },
  "model tiny": { run: modelTinyCommand, help: MODEL_TINY_HELP },
  "model calibrate-sparse": { run: calibrateSparseCommand, help: CALIBRATE_SPARSE_HELP },
  "model quantize": { run: modelQuantizeCommand, help: MODEL_QUANTIZE_HELP },
  "reuse calibrate": { run: reuseCalibrateCommand, help: REUSE_CALIBRATE_HELP },
};

/** Groups of subcommands: their help when called without a subcommand. */
const GROUPS: Record<string, string> = { index: INDEX_HELP, model: MODEL_HELP, reuse: REUSE_HELP };

export interface CliIo extends CommandIo {
  err(text: string): void;
}

export function processIo(): CliIo {
  return {
    out: (text) => void process.stdout.write(text),
    err: (text) => void process.stderr.write(text),
    progress: Boolean(process.stderr.isTTY),
  };
}

export async function runCli(argv: string[], io: CliIo = processIo()): Promise<number> {
  const [first, second] = argv;
  if (first === undefined || first === "-h" || first === "--help" || first === "help") {
    if (first === "help" && second !== undefined) return runCli([...argv.slice(1), "--help"], io);
    if (first === undefined) {
      io.err(MAIN_HELP);
      return EXIT_USAGE;
    }
    io.out(MAIN_HELP);
    return EXIT_OK;
  }
  if (first === "-V" || first === "--version" || first === "version") {
    io.out(`${VERSION}\n`);
    return EXIT_OK;
  }

  let name = first;
  let rest = argv.slice(1);
  if (GROUPS[first] !== undefined) {
    if (second === undefined) {
      io.err(GROUPS[first]!);
      return EXIT_USAGE;
    }
    if (second === "-h" || second === "--help") {
      io.out(GROUPS[first]!);
      return EXIT_OK;
    }
    name = `${first} ${second}`;
    rest = argv.slice(2);
  }
  const command = COMMANDS[name];
  if (!command) {
    io.err(`ctxr: unknown command '${name}'\nRun 'ctxr --help' for the list of commands.\n`);
    return EXIT_USAGE;
  }

  try {
    return await command.run(rest, io);
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`ctxr ${name}: ${error.message}\nRun 'ctxr ${name} --help' for usage.\n`);
      return EXIT_USAGE;
    }
    if (error instanceof ContextsJsonlError || error instanceof InputError) {
      io.err(`ctxr ${name}: ${error.message}\n`);
      return EXIT_USAGE;
    }
    const message = error instanceof Error ? error.message : String(error);
    io.err(`ctxr ${name}: ${message}\n`);
    if (process.env.CTXR_DEBUG && error instanceof Error && error.stack) io.err(`${error.stack}\n`);
    return EXIT_FAILURE;
  }
}
