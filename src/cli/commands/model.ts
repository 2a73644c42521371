/**
 * `ctxr model tiny`: writes a deterministic tiny Llama-architecture checkpoint
 * (Hugging Face layout, random weights, byte-level tokenizer) for tests, fixtures,
 * smoke runs and benchmarks (src/model/tinyModel.ts).
 */
import { BYTE_TOKENIZER_VOCAB } from "../../model/byteTokenizer.ts";
import {
  MODEL_DTYPES,
  type ModelDtype,
  ROPE_SCALINGS,
  type RopeScaling,
  TINY_MODEL_DEFAULTS,
  TinyModelError,
  type TinyModelOptions,
  checkTinyModelOptions,
  tinyModelFiles,
  tinyModelParameterCount,
} from "../../model/tinyModel.ts";
import { ModelFolderError, writeModelFolder } from "../../model/writeModelFolder.ts";
import { EXIT_OK, InputError, UsageError, choiceFlag, integerFlag, numberFlag, requiredString } from "../args.ts";
import type { FlagSpec, ParsedFlags } from "../args.ts";
import { attributeToSource } from "../flagSources.ts";
import { parseSourcedFlags } from "../sourcedFlags.ts";
import type { CommandIo } from "./types.ts";

const D = TINY_MODEL_DEFAULTS;

export const MODEL_HELP = `Usage: ctxr model <subcommand> [options]

Subcommands:
  pull           download a model from the Hugging Face Hub by name,
                 hf:ORG/REPO[:QUANT|FILE][@REV] (see 'ctxr model pull --help')
  tiny           write a deterministic tiny Llama checkpoint (see 'ctxr model tiny --help')
  calibrate-sparse
                 calibrate sparse decode's trigger thresholds for ctxr serve
                 (see 'ctxr model calibrate-sparse --help')
  quantize       write a model folder or GGUF file as a GGUF file of a weight type
                 (see 'ctxr model quantize --help')

The commands that read a model (quantize, calibrate-sparse) also take one by name,
hf:ORG/REPO..., as 'ctxr serve --model'. Every option is also settable as
CTXR_<OPTION> or in --config FILE (see each command's --help).
`;

export const MODEL_TINY_HELP = `Usage: ctxr model tiny --out DIR [options]

Writes a tiny Llama-architecture checkpoint in Hugging Face layout with random
weights: config.json (LlamaForCausalLM), model.safetensors, and a byte-level
tokenizer (tokenizer.json: 256 byte tokens, <s>=256, </s>=257, <pad>=258;
tokenizer_config.json with a Llama-style chat template). The same options give
byte-identical files on every machine. For tests, smoke runs and benchmarks.
The last line on stdout is a JSON summary: out, parameters, dtype, and each
file's bytes and sha256.

Options:
  --out DIR                folder to write (created; must be empty unless --force)
  --seed N                 weight seed, a non-negative integer (default ${D.seed})
  --layers N               decoder layers (default ${D.layers})
  --hidden N               hidden size (default ${D.hidden})
  --heads N                attention heads; must divide --hidden (default ${D.heads})
  --kv-heads N             key/value heads; must divide --heads (default ${D.kvHeads})
  --intermediate N         MLP intermediate size (default ${D.intermediate})
  --vocab N                vocab size, >= ${BYTE_TOKENIZER_VOCAB}; rows past the tokenizer's are padding (default ${D.vocab})
  --dtype T                ${MODEL_DTYPES.join(" | ")} (default ${D.dtype})
  --max-positions N        max_position_embeddings (default ${D.maxPositions})
  --rope-theta X           rotary base (default ${D.ropeTheta})
  --rope-scaling S         ${ROPE_SCALINGS.join(" | ")}: llama3 writes Llama 3's rope_scaling (default none)
  --tie-embeddings         no lm_head: output weights tied to the embedding
  --qkv-bias               q/k/v projection biases (written as a Qwen2 checkpoint)
  --qk-norm                per-head q/k RMSNorm (written as a Qwen3 checkpoint)
  --head-dim N             head size, heads · N need not be --hidden (default: hidden / heads)
  --attention-gain X       q_proj and k_proj std times X: sharper attention (default ${D.attentionGain})
  --force                  overwrite the files in a non-empty folder
  --config FILE            options from a JSON or YAML file (keys: the long names)
  -h, --help               this help

Every option can also be set as CTXR_<OPTION> (e.g. CTXR_LAYERS=4) or in
--config FILE; the command line wins over the environment, which wins over the file.

Exit codes: 0 success, 2 bad usage or unusable folder, 1 other failure.
`;

const COMMAND = "model tiny";

const FLAGS: FlagSpec = {
  out: { type: "string" },
  seed: { type: "string" },
  layers: { type: "string" },
  hidden: { type: "string" },
  heads: { type: "string" },
  "kv-heads": { type: "string" },
  intermediate: { type: "string" },
  vocab: { type: "string" },
  dtype: { type: "string" },
  "max-positions": { type: "string" },
  "rope-theta": { type: "string" },
  "rope-scaling": { type: "string" },
  "tie-embeddings": { type: "boolean" },
  "qkv-bias": { type: "boolean" },
  "qk-norm": { type: "boolean" },
  "head-dim": { type: "string" },
  "attention-gain": { type: "string" },
  force: { type: "boolean" },
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
};

type TinyModelRequest = { out: string; force: boolean; options: TinyModelOptions };

/** The model options from the flags (the command line, CTXR_<OPTION>, --config); bad values and impossible shapes are UsageErrors naming their source. */
export function tinyModelOptionsFromFlags(args: string[], env: Record<string, string | undefined> = process.env): TinyModelRequest | "help" {
  const flags = parseSourcedFlags(args, FLAGS, COMMAND, env);
  if (flags.values.help) return "help";
  try {
    return tinyModelRequest(flags);
  } catch (error) {
    throw attributeToSource(error, flags);
  }
}

function tinyModelRequest(flags: ParsedFlags): TinyModelRequest {
  const out = requiredString(flags, "out", COMMAND);
  const options: TinyModelOptions = {
    seed: integerFlag(flags, "seed", COMMAND, 0) ?? D.seed,
    layers: integerFlag(flags, "layers", COMMAND, 1) ?? D.layers,
    hidden: integerFlag(flags, "hidden", COMMAND, 1) ?? D.hidden,
    heads: integerFlag(flags, "heads", COMMAND, 1) ?? D.heads,
    kvHeads: integerFlag(flags, "kv-heads", COMMAND, 1) ?? D.kvHeads,
    intermediate: integerFlag(flags, "intermediate", COMMAND, 1) ?? D.intermediate,
    vocab: integerFlag(flags, "vocab", COMMAND, BYTE_TOKENIZER_VOCAB) ?? D.vocab,
    dtype: choiceFlag<ModelDtype>(flags, "dtype", COMMAND, MODEL_DTYPES, D.dtype),
    maxPositions: integerFlag(flags, "max-positions", COMMAND, 1) ?? D.maxPositions,
    ropeTheta: numberFlag(flags, "rope-theta", COMMAND, D.ropeTheta, { min: 0 }),
    ropeScaling: choiceFlag<RopeScaling>(flags, "rope-scaling", COMMAND, ROPE_SCALINGS, D.ropeScaling),
    tieEmbeddings: Boolean(flags.values["tie-embeddings"]),
    qkvBias: Boolean(flags.values["qkv-bias"]),
    qkNorm: Boolean(flags.values["qk-norm"]),
    headDim: integerFlag(flags, "head-dim", COMMAND, 2) ?? D.headDim,
    attentionGain: numberFlag(flags, "attention-gain", COMMAND, D.attentionGain, { min: 0 }),
  };
  if (options.attentionGain <= 0) throw new UsageError(`--attention-gain must be a positive number, got '${flags.values["attention-gain"]}'`, COMMAND);
  if (options.ropeTheta <= 0) throw new UsageError(`--rope-theta must be a positive number, got '${flags.values["rope-theta"]}'`, COMMAND);
  try {
    checkTinyModelOptions(options);
  } catch (error) {
    if (error instanceof TinyModelError) throw new UsageError(error.message, COMMAND);
    throw error;
  }
  return { out, force: Boolean(flags.values.force), options };
}

export async function modelTinyCommand(args: string[], io: CommandIo): Promise<number> {
  const parsed = tinyModelOptionsFromFlags(args);
  if (parsed === "help") {
    io.out(MODEL_TINY_HELP);
    return EXIT_OK;
  }
  const { out, force, options } = parsed;
  const started = performance.now();
  let written;
  try {
    written = writeModelFolder(out, tinyModelFiles(options), { overwrite: force });
  } catch (error) {
    if (error instanceof ModelFolderError) throw new InputError(error.message);
    throw error;
  }
  const parameters = tinyModelParameterCount(options);
  const totalBytes = written.reduce((sum, file) => sum + file.bytes, 0);
  io.out(
    `ctxr: wrote a tiny ${options.qkvBias ? "Qwen2" : options.qkNorm ? "Qwen3" : "Llama"} model to ${out}: ${parameters} parameters (${options.dtype}), ` +
      `${options.layers} layers, hidden ${options.hidden}, seed ${options.seed}; ${totalBytes} bytes\n`,
  );
  io.out(
    JSON.stringify({
      out,
      parameters,
      dtype: options.dtype,
      seed: options.seed,
      write_ms: Math.round((performance.now() - started) * 1000) / 1000,
      files: Object.fromEntries(written.map((file) => [file.name, { bytes: file.bytes, sha256: file.sha256 }])),
    }) + "\n",
  );
  return EXIT_OK;
}
