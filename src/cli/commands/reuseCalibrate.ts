/**
 * `ctxr reuse calibrate`: the smallest recompute ratio per policy whose answers agree with full
 * prefill at least as often as a target, measured offline on the real runner
 * (quality/reuseCalibration.ts), with a one-sided 95% lower confidence bound
 * (quality/calibrationStatistics.ts). docs/reuse-target.md.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { resolveModelSource } from "../../model/modelSource.ts";
import { loadSourceTokenizer } from "../../model/sourceTokenizer.ts";
import { findRunner } from "../../runner/runnerExecutable.ts";
import type { RecomputePolicy } from "../../kv/recomputeSelection.ts";
import { promptTokens } from "../../kv/segmentedPrompt.ts";
import { CalibrationRequestError, parseCalibrationRequests } from "../../quality/calibrationRequests.ts";
import { BOOTSTRAP_RESAMPLES, CONFIDENCE, calibratePolicies, cellFigures, type CellFigures, type RequestOutcome } from "../../quality/calibrationStatistics.ts";
import { CALIBRATION_POLICIES, calibrationPrompt, ReuseCalibration, type CalibrationCell } from "../../quality/reuseCalibration.ts";
import { EXIT_OK, InputError, UsageError, integerFlag, numberFlag, requiredString } from "../args.ts";
import type { FlagSpec } from "../args.ts";
import type { SourcedFlags } from "../flagSources.ts";
import { localModelPath } from "../hubModelLoader.ts";
import { parseSourcedFlags, withFlagSources } from "../sourcedFlags.ts";
import { lazyProgressBar } from "../progress.ts";
import type { CommandIo } from "./types.ts";

const COMMAND = "reuse calibrate";
const DEFAULT_RATIOS = [0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6];
const DEFAULT_TOKENS = 16;
const MAX_TOKENS = 256;

export const REUSE_HELP = `Usage: ctxr reuse <subcommand> [options]

Subcommands:
  calibrate      the smallest recompute ratio per policy that meets an agreement
                 target, measured offline (see 'ctxr reuse calibrate --help')

Serving with a target instead: ctxr serve --model M --reuse-target-agreement A
(docs/reuse-target.md).
`;

export const REUSE_CALIBRATE_HELP = `Usage: ctxr reuse calibrate --model M --requests FILE.jsonl --target A [options]

For each request, stores its documents first in another order (so that the
measured request reuses every chunk at a new position after new neighbours),
then answers it with full prefill and with each policy at each ratio reusing the
cached chunks, and compares the answers: the first token (top-1 agreement, KL
divergence) and the first --tokens greedy tokens. A request's agreement is the
share of those tokens that match full prefill's before the first difference.

Prints per policy and ratio the mean agreement over the requests with its
one-sided 95% lower confidence bound (a percentile bootstrap over the requests,
${BOOTSTRAP_RESAMPLES} resamples, seeded), then per policy the smallest ratio whose
mean agreement meets A, its bound, and the smallest ratio whose bound meets A.

FILE.jsonl: one request a line, as the server segments a prompt whose chunks it
reuses (completion "segments": each document a chunk, then the question):
  {"documents": ["text", ...], "question": "text", "warmup_order": [1, 0]}
warmup_order (optional): the order the documents are first stored in (default:
rotated by one). Blank lines are skipped. scripts/calibration-requests.ts writes
such a file from the quality tasks of models/quality.

Options:
  --model M          a Hugging Face model folder, a .gguf file, a folder holding
                     one, or hf:ORG/REPO[:QUANT|FILE][@REV] (as ctxr serve --model)
  --offline          with --model hf:...: only the model cache, no download
  --requests FILE    the requests (JSONL, above)
  --target A         the agreement to meet, 0 < A <= 1
  --policies P,...   of prophet, cachecraft, epic (default: all three)
  --ratios R,...     recompute ratios to try, each 0..1 (default ${DEFAULT_RATIOS.join(",")})
  --tokens N         greedy tokens compared per answer, 1..${MAX_TOKENS} (default ${DEFAULT_TOKENS})
  --device D         cpu (default), cuda or cuda:N
  --threads N        CPU threads of the runner (default: all cores)
  --json FILE        also write the report as JSON to FILE
  --config FILE      options from a JSON or YAML file (keys: the long names)
  -h, --help         this help

Every option can also be set as CTXR_<OPTION> or in --config FILE; the command
line wins over the environment, which wins over the file.

Exit codes: 0 success (also when no ratio meets the target: the report says so),
2 bad usage or a bad requests file, 1 failure (model not loadable, runner failure).
`;

const FLAGS: FlagSpec = {
  model: { type: "string" },
  requests: { type: "string" },
  target: { type: "string" },
  policies: { type: "string" },
  ratios: { type: "string" },
  tokens: { type: "string" },
  device: { type: "string" },
  threads: { type: "string" },
  json: { type: "string" },
  offline: { type: "boolean" },
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
};

function listFlag(flags: SourcedFlags, name: string): string[] | undefined {
  const raw = flags.values[name];
  if (typeof raw !== "string") return undefined;
  const items = raw.split(",").map((item) => item.trim());
  if (items.some((item) => item === "")) throw new UsageError(`--${name} must be a comma-separated list, got '${raw}'`, COMMAND);
  return items;
}

function policiesFlag(flags: SourcedFlags): RecomputePolicy[] {
  const items = listFlag(flags, "policies") ?? [...CALIBRATION_POLICIES];
  for (const item of items) {
    if (!CALIBRATION_POLICIES.includes(item as RecomputePolicy)) throw new UsageError(`--policies takes ${CALIBRATION_POLICIES.join(", ")} (the policies a ratio sizes), got '${item}'`, COMMAND);
  }
  return [...new Set(items as RecomputePolicy[])];
}

function ratiosFlag(flags: SourcedFlags): number[] {
  const items = listFlag(flags, "ratios");
  if (items === undefined) return DEFAULT_RATIOS;
  const ratios = items.map((item) => {
    const value = Number(item);
    if (!(Number.isFinite(value) && value >= 0 && value <= 1)) throw new UsageError(`--ratios must be numbers from 0 to 1, got '${item}'`, COMMAND);
    return value;
  });
  return [...new Set(ratios)].sort((a, b) => a - b);
}

export async function reuseCalibrateCommand(args: string[], io: CommandIo & { err?(text: string): void }): Promise<number> {
  const flags = parseSourcedFlags(args, FLAGS, COMMAND);
  if (flags.values.help) {
    io.out(REUSE_CALIBRATE_HELP);
    return EXIT_OK;
  }
  return withFlagSources(flags, () => calibrateWithFlags(flags, io));
}

const percent = (x: number | null) => (x === null ? "-" : `${(100 * x).toFixed(1)}%`);
const ratioText = (x: number | null) => (x === null ? "none" : String(x));

async function calibrateWithFlags(flags: SourcedFlags, io: CommandIo & { err?(text: string): void }): Promise<number> {
  const model = requiredString(flags, "model", COMMAND);
  const requestsPath = requiredString(flags, "requests", COMMAND);
  if (flags.values.target === undefined) throw new UsageError("missing --target", COMMAND);
  const target = numberFlag(flags, "target", COMMAND, 1, { min: 0, max: 1 });
  if (!(target > 0)) throw new UsageError(`--target must be above 0 and at most 1, got '${flags.values.target}'`, COMMAND);
  const policies = policiesFlag(flags);
  const ratios = ratiosFlag(flags);
  const tokens = integerFlag(flags, "tokens", COMMAND, 1) ?? DEFAULT_TOKENS;
  if (tokens > MAX_TOKENS) throw new UsageError(`--tokens must be at most ${MAX_TOKENS}, got '${flags.values.tokens}'`, COMMAND);
  const device = typeof flags.values.device === "string" ? flags.values.device : "cpu";
  if (!/^(cpu|cuda(:\d+)?)$/.test(device)) throw new UsageError(`--device must be cpu, cuda or cuda:N, got '${device}'`, COMMAND);
  const threads = integerFlag(flags, "threads", COMMAND, 1);
  const jsonPath = flags.values.json;
  if (jsonPath === "") throw new UsageError("--json needs a file", COMMAND);

  let text: string;
  try {
    text = readFileSync(requestsPath, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new InputError(code === "ENOENT" ? `requests file ${requestsPath} does not exist` : `cannot read requests file ${requestsPath}: ${(error as Error).message}`);
  }
  let requests;
  try {
    requests = parseCalibrationRequests(text, requestsPath);
  } catch (error) {
    if (error instanceof CalibrationRequestError) throw new InputError(error.message);
    throw error;
  }

  const err = io.err ?? ((line: string) => void process.stderr.write(line));
  const local = await localModelPath(model, { offline: Boolean(flags.values.offline), offlineFrom: flags.origins.offline, command: COMMAND, terminal: io.progress, err });
  const source = resolveModelSource(local.path);
  const { tokenizer, addBos } = await loadSourceTokenizer(source);
  const prompts = requests.map((request) => ({
    request,
    warmup: calibrationPrompt(tokenizer, addBos, request, request.warmupOrder),
    measured: calibrationPrompt(tokenizer, addBos, request, request.documents.map((_, d) => d)),
  }));
  const cells: CalibrationCell[] = policies.flatMap((policy) => ratios.map((ratio) => ({ policy, ratio })));

  const calibration = await ReuseCalibration.open({
    executable: await findRunner(device),
    model: source.path,
    blocks: Math.max(...prompts.map((p) => ReuseCalibration.blocksFor(p.measured, tokens))),
    threads,
    device,
    stopIds: tokenizer.eosTokenIds,
  });
  const outcomes: RequestOutcome[][] = cells.map(() => []);
  const progress = lazyProgressBar(io.progress);
  try {
    const positions = calibration.maxPositions;
    const tooLong = prompts.find((p) => positions > 0 && promptTokens(p.measured).length + tokens > positions);
    if (tooLong !== undefined) {
      throw new InputError(`${requestsPath} line ${tooLong.request.line}: the prompt has ${promptTokens(tooLong.measured).length} tokens; with --tokens ${tokens} it needs more than the model's ${positions} positions`);
    }
    for (const [i, p] of prompts.entries()) {
      progress.onProgress("calibrating", i, prompts.length);
      const measured = await calibration.measure(p.warmup, p.measured, cells, tokens);
      measured.forEach((outcome, c) => outcomes[c]!.push(outcome));
    }
  } finally {
    progress.stop();
    await calibration.close();
  }

  const figures: CellFigures[] = cells.map((cell, c) => cellFigures(cell.policy, cell.ratio, outcomes[c]!));
  const calibrated = calibratePolicies(figures, target);
  const report = {
    model: source.path,
    requests: requests.length,
    target,
    tokens,
    bound: `one-sided ${100 * CONFIDENCE}% lower bound of the mean agreement: percentile bootstrap over requests, ${BOOTSTRAP_RESAMPLES} resamples`,
    cells: figures.map((f) => ({ policy: f.policy, ratio: f.ratio, agreement: f.agreement, lower_bound: f.lowerBound, top1_agreement: f.topOneAgreement, mean_kl: f.meanKl, recomputed_share: f.recomputedShare })),
    policies: calibrated.map((p) => ({ policy: p.policy, ratio: p.ratio, lower_bound: p.lowerBound, confident_ratio: p.confidentRatio })),
  };
  if (typeof jsonPath === "string") writeFileSync(jsonPath, JSON.stringify(report, null, 2) + "\n");

  let out = `ctxr: ${requests.length} requests, ${tokens} greedy tokens each, target agreement ${target}\n\n`;
  out += `policy      ratio  recomputed  agreement  95% lower bound  first-token top-1  mean KL (nats)\n`;
  for (const f of figures) {
    out += `${f.policy.padEnd(10)}  ${String(f.ratio).padStart(5)}  ${percent(f.recomputedShare).padStart(10)}  ${percent(f.agreement).padStart(9)}  ${percent(f.lowerBound).padStart(15)}  ${percent(f.topOneAgreement).padStart(17)}  ${f.meanKl.toFixed(4).padStart(14)}\n`;
  }
  out += `(recomputed: the share of the reused chunks' tokens recomputed, over all requests)\n`;
  out += `\nSmallest ratio meeting ${target} (bound: one-sided 95%, bootstrap over requests):\n`;
  for (const p of calibrated) {
    out += `  ${p.policy.padEnd(10)}  ratio ${ratioText(p.ratio)}${p.ratio === null ? "" : ` (lower bound ${percent(p.lowerBound)})`}; with its bound meeting ${target}: ${ratioText(p.confidentRatio)}\n`;
  }
  io.out(out);
  return EXIT_OK;
}


