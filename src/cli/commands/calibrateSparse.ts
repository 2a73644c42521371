/**
 * `ctxr model calibrate-sparse`: calibrates sparse decode's reconstruction trigger for a model.
 * Greedy dense decodes of the given prompts on the real runner give each step's entropy and
 * varentropy; the chosen quantile of their windowed means are the thresholds to pass to
 * `ctxr serve` (CHESS calibrates at the 99th percentile offline).
 */
import { readFileSync } from "node:fs";
import { completionIds } from "../../model/completionPrompt.ts";
import { resolveModelSource } from "../../model/modelSource.ts";
import { loadSourceTokenizer } from "../../model/sourceTokenizer.ts";
import { findRunner } from "../../runner/runnerExecutable.ts";
import { RunnerProcess } from "../../runner/runnerProcess.ts";
import {
  calibrateThresholds,
  DEFAULT_TRIGGER_WINDOW,
  MAX_TRIGGER_WINDOW,
  tokenUncertainty,
  type TokenUncertainty,
  windowedMeans,
} from "../../kv/uncertaintyTrigger.ts";
import { EXIT_OK, InputError, UsageError, integerFlag, numberFlag, requiredString } from "../args.ts";
import type { FlagSpec } from "../args.ts";
import type { SourcedFlags } from "../flagSources.ts";
import { localModelPath } from "../hubModelLoader.ts";
import { parseSourcedFlags, withFlagSources } from "../sourcedFlags.ts";
import { lazyProgressBar } from "../progress.ts";
import type { CommandIo } from "./types.ts";

const DEFAULT_MAX_TOKENS = 64;
const DEFAULT_QUANTILE = 0.99;
const BLOCK_SIZE = 16;
const PREFILL_CHUNK = 512;

export const CALIBRATE_SPARSE_HELP = `Usage: ctxr model calibrate-sparse --model DIR|FILE.gguf|hf:ORG/REPO[:QUANT|FILE][@REV] --prompts FILE [options]

Calibrates sparse decode's reconstruction trigger (ctxr serve --sparse-*) for a
model: greedy decodes each prompt reading the whole KV cache, takes the entropy
and varentropy (nats, nats²) of every step's next-token distribution, averages
them over every window of --window consecutive steps of a prompt, and prints the
--quantile of those means as the thresholds, with the 'ctxr serve' flags that set
them. Sparse decode then selects its pages again on the windows above them (about
1% of the calibration windows at the default quantile).

FILE is JSONL: one {"prompt": "text"} per line (blank lines skipped), tokenized
as /v1/completions tokenizes a text prompt. Prompts like your traffic's give the
most useful thresholds.

Options:
  --model M          the model as for ctxr serve --model: a Hugging Face model
                     folder, a .gguf file, a folder holding one .gguf file, or
                     a model on the Hugging Face Hub by name, hf:ORG/REPO[:QUANT|FILE][@REV]
                     (fetched into the model cache first, as 'ctxr model pull')
  --offline          with --model hf:...: only the model cache, no download
                     (also CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1)
  --prompts FILE     the calibration prompts (JSONL)
  --max-tokens N     tokens decoded per prompt, fewer when it ends (default ${DEFAULT_MAX_TOKENS})
  --quantile Q       quantile of the windowed means, 0..1 (default ${DEFAULT_QUANTILE})
  --window N         decode steps per window, 1..${MAX_TRIGGER_WINDOW} (default ${DEFAULT_TRIGGER_WINDOW}): the
                     --sparse-trigger-window to serve with
  --device D         cpu (default), cuda or cuda:N
  --threads N        CPU threads of the runner (default: all cores)
  --json             print a JSON object instead of text
  --config FILE      options from a JSON or YAML file (keys: the long names)
  -h, --help         this help

Every option can also be set as CTXR_<OPTION> (e.g. CTXR_PROMPTS=prompts.jsonl) or
in --config FILE; the command line wins over the environment, which wins over the file.

Exit codes: 0 success, 2 bad usage or a bad prompts file (or too few decode steps
to fill a window), 1 failure (model not loadable, runner failure).
`;

const COMMAND = "model calibrate-sparse";

const FLAGS: FlagSpec = {
  model: { type: "string" },
  prompts: { type: "string" },
  "max-tokens": { type: "string" },
  quantile: { type: "string" },
  window: { type: "string" },
  device: { type: "string" },
  threads: { type: "string" },
  json: { type: "boolean" },
  offline: { type: "boolean" },
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
};

interface Prompt {
  line: number;
  text: string;
}

/** The prompts of a JSONL file; InputErrors name the file and line. */
export function readPromptsFile(path: string): Prompt[] {
  let content: string;
  try {
    content = readFileSync(path, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw new InputError(`prompts file ${path} does not exist`);
    if (code === "EISDIR") throw new InputError(`prompts file ${path} is a folder`);
    throw new InputError(`cannot read prompts file ${path}: ${(error as Error).message}`);
  }
  const prompts: Prompt[] = [];
  content.split("\n").forEach((raw, i) => {
    const line = i + 1;
    if (raw.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch (error) {
      throw new InputError(`${path} line ${line}: not valid JSON (${(error as Error).message})`);
    }
    const prompt = typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>).prompt : undefined;
    if (typeof prompt !== "string") throw new InputError(`${path} line ${line}: expected an object with a "prompt" string, like {"prompt": "text"}`);
    if (prompt === "") throw new InputError(`${path} line ${line}: "prompt" is empty`);
    prompts.push({ line, text: prompt });
  });
  if (prompts.length === 0) throw new InputError(`prompts file ${path} has no prompts (one {"prompt": "text"} per line)`);
  return prompts;
}

function argmax(logits: Float32Array): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
  return best;
}

/** Each step's uncertainty of a greedy decode of `ids` over the full KV cache: one per generated token, up to `maxTokens`. */
async function denseDecodeSteps(runner: RunnerProcess, ids: readonly number[], maxTokens: number, stopIds: ReadonlySet<number>): Promise<TokenUncertainty[]> {
  const vocab = runner.info.vocab;
  const table = await runner.alloc(Math.ceil((ids.length + maxTokens) / runner.info.block_size));
  try {
    let logits: Float32Array = new Float32Array(0);
    for (let start = 0; start < ids.length; start += PREFILL_CHUNK) {
      const end = Math.min(ids.length, start + PREFILL_CHUNK);
      const indices = Array.from({ length: end - start }, (_, i) => start + i);
      const out = await runner.forward({ sequences: [{ table, tokens: ids.slice(start, end), indices, logitRows: end === ids.length ? [end - start - 1] : [] }] });
      logits = out.logits[0]!.subarray(0, vocab);
    }
    const steps: TokenUncertainty[] = [];
    for (let index = ids.length; ; index++) {
      // The trigger sees every step's logits at temperature 1, whatever the request samples with.
      steps.push(tokenUncertainty(logits));
      const token = argmax(logits);
      if (steps.length === maxTokens || stopIds.has(token)) return steps;
      const out = await runner.forward({ sequences: [{ table, tokens: [token], indices: [index], logitRows: [0] }] });
      logits = out.logits[0]!.subarray(0, vocab);
    }
  } finally {
    await runner.free(table);
  }
}

/** 4 significant digits: what the printed flags carry (the JSON fields keep every digit). */
const flagNumber = (x: number) => String(Number(x.toPrecision(4)));

const shellWord = (word: string) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`);

export async function calibrateSparseCommand(args: string[], io: CommandIo & { err?(text: string): void }): Promise<number> {
  const flags = parseSourcedFlags(args, FLAGS, COMMAND);
  if (flags.values.help) {
    io.out(CALIBRATE_SPARSE_HELP);
    return EXIT_OK;
  }
  return withFlagSources(flags, () => calibrateWithFlags(flags, io));
}

async function calibrateWithFlags(flags: SourcedFlags, io: CommandIo & { err?(text: string): void }): Promise<number> {
  const model = requiredString(flags, "model", COMMAND);
  const promptsPath = requiredString(flags, "prompts", COMMAND);
  const maxTokens = integerFlag(flags, "max-tokens", COMMAND, 1) ?? DEFAULT_MAX_TOKENS;
  const quantile = numberFlag(flags, "quantile", COMMAND, DEFAULT_QUANTILE, { min: 0, max: 1 });
  const window = integerFlag(flags, "window", COMMAND, 1) ?? DEFAULT_TRIGGER_WINDOW;
  if (window > MAX_TRIGGER_WINDOW) throw new UsageError(`--window must be at most ${MAX_TRIGGER_WINDOW} steps, got '${flags.values.window}'`, COMMAND);
  const device = typeof flags.values.device === "string" ? flags.values.device : "cpu";
  if (!/^(cpu|cuda(:\d+)?)$/.test(device)) throw new UsageError(`--device must be cpu, cuda or cuda:N, got '${device}'`, COMMAND);
  const threads = integerFlag(flags, "threads", COMMAND, 1);

  const prompts = readPromptsFile(promptsPath);
  const err = io.err ?? ((text: string) => void process.stderr.write(text));
  const local = await localModelPath(model, { offline: Boolean(flags.values.offline), offlineFrom: flags.origins.offline, command: COMMAND, terminal: io.progress, err });
  const source = resolveModelSource(local.path);
  const dir = source.path;
  const { tokenizer, addBos } = await loadSourceTokenizer(source);
  const tokenized = prompts.map((prompt) => ({ ...prompt, ids: completionIds(tokenizer, addBos, prompt.text) }));
  const longest = Math.max(...tokenized.map((p) => p.ids.length));

  const runner = await RunnerProcess.start({
    executable: await findRunner(device),
    model: dir,
    blocks: Math.ceil((longest + maxTokens) / BLOCK_SIZE),
    blockSize: BLOCK_SIZE,
    threads,
    device,
    // Dense decode only: one KV group for every layer (a model with sliding-window layers then needs
    // no sliding tables; its sliding layers still attend within their window).
    kvGroups: 1,
  });
  const stopIds = new Set(tokenizer.eosTokenIds);
  const progress = lazyProgressBar(io.progress);
  const means: TokenUncertainty[] = [];
  let decodeSteps = 0;
  let mostSteps = 0;
  try {
    const positions = runner.info.max_position_embeddings;
    const tooLong = tokenized.find((prompt) => positions > 0 && prompt.ids.length + maxTokens > positions);
    if (tooLong !== undefined) {
      throw new InputError(
        `${promptsPath} line ${tooLong.line}: the prompt has ${tooLong.ids.length} tokens; with --max-tokens ${maxTokens} it needs ${tooLong.ids.length + maxTokens} positions, and the model has ${positions}`,
      );
    }
    for (const [i, prompt] of tokenized.entries()) {
      progress.onProgress("decoding", i, tokenized.length);
      const steps = await denseDecodeSteps(runner, prompt.ids, maxTokens, stopIds);
      decodeSteps += steps.length;
      mostSteps = Math.max(mostSteps, steps.length);
      means.push(...windowedMeans(steps, window));
    }
  } finally {
    progress.stop();
    await runner.shutdown();
  }
  if (means.length === 0) {
    throw new UsageError(
      `collected ${decodeSteps} decode steps (at most ${mostSteps} from one prompt), but a window needs ${window} consecutive steps of one prompt; raise --max-tokens to at least ${window} or lower --window`,
      COMMAND,
    );
  }
  const { entropyThreshold, varentropyThreshold } = calibrateThresholds(means, quantile);
  if (!(entropyThreshold > 0 && varentropyThreshold > 0)) {
    throw new Error(`the windowed means are 0 at quantile ${quantile} (entropy ${entropyThreshold}, varentropy ${varentropyThreshold}); calibrate on other prompts or a higher --quantile`);
  }
  const serveArgs = [
    "--sparse-entropy-threshold",
    flagNumber(entropyThreshold),
    "--sparse-varentropy-threshold",
    flagNumber(varentropyThreshold),
    "--sparse-trigger-window",
    String(window),
  ];

  if (flags.values.json) {
    io.out(
      JSON.stringify({
        model: dir,
        prompts: prompts.length,
        decode_steps: decodeSteps,
        windows: means.length,
        window,
        quantile,
        max_tokens: maxTokens,
        entropy_threshold: entropyThreshold,
        varentropy_threshold: varentropyThreshold,
        serve_args: serveArgs,
      }) + "\n",
    );
    return EXIT_OK;
  }
  io.out(
    `ctxr: ${prompts.length} prompts, ${decodeSteps} decode steps, ${means.length} windows of ${window} steps; their ${quantile} quantile:\n` +
      `  entropy threshold     ${flagNumber(entropyThreshold)} nats\n` +
      `  varentropy threshold  ${flagNumber(varentropyThreshold)} nats²\n` +
      `Serve with:\n` +
      `  ctxr serve --model ${shellWord(model)} ${serveArgs.join(" ")}\n`,
  );
  return EXIT_OK;
}
