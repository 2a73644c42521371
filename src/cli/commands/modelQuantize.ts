/**
 * `ctxr model quantize IN OUT --type T`: a Hugging Face model folder or a GGUF file to a
 * GGUF file of the chosen type (src/model/gguf/quantizeModel.ts), written through a
 * temporary file. Progress on stderr (a bar on a terminal), one summary line on stdout.
 */
import { statSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, resolve } from "node:path";
import { GgmlTypeError } from "../../model/gguf/ggufTypes.ts";
import { GgufError } from "../../model/gguf/ggufMetadata.ts";
import { GgufMetadataError } from "../../model/gguf/ggufMetadataValues.ts";
import { ModelConversionError } from "../../model/gguf/hfToGguf.ts";
import { QuantizeInputError, quantizeModel } from "../../model/gguf/quantizeModel.ts";
import { QUANTIZE_TYPES, type QuantizeType } from "../../model/gguf/quantizeTypePlan.ts";
import { TokenizerConversionError } from "../../model/gguf/tokenizerToGguf.ts";
import { SafetensorsError } from "../../model/safetensors.ts";
import { EXIT_OK, InputError, UsageError, integerFlag } from "../args.ts";
import type { FlagSpec } from "../args.ts";
import type { SourcedFlags } from "../flagSources.ts";
import { localModelPath } from "../hubModelLoader.ts";
import { parseSourcedFlags, withFlagSources } from "../sourcedFlags.ts";
import { lazyProgressBar } from "../progress.ts";
import type { CommandIo } from "./types.ts";

export const MODEL_QUANTIZE_HELP = `Usage: ctxr model quantize IN OUT --type T

Writes the model IN as the GGUF file OUT with weights of type T. IN is a Hugging
Face model folder (config.json, *.safetensors, tokenizer.json, tokenizer_config.json;
Llama, Mistral or Qwen2), a GGUF file (re-quantized: metadata kept), or a model on
the Hugging Face Hub by name, hf:ORG/REPO[:QUANT|FILE][@REV], fetched into the model
cache first (as 'ctxr model pull'). The file
follows llama.cpp's conventions (tensor names, metadata, tokenizer, q/k row order).

Types: ${QUANTIZE_TYPES.join(" | ")}
  Per-tensor types follow llama.cpp's llama-quantize (src/llama-quant.cpp) for the same
  file type, tensor for tensor; quantized blocks are ggml's reference quantizers' bytes.
  q4_k_m / q5_k_m: Q4_K / Q5_K weights; attn_v and ffn_down of the first and last eighth
  of the layers and every third between Q6_K; output.weight (the embedding when tied)
  Q6_K. q4_k_s / q5_k_s: llama.cpp's Q4_K_S / Q5_K_S. q4_0 and q6_k: output Q6_K.
  q4_k: ctxr's earlier Q4_K mix (no per-layer rules; short rows Q8_0).
  Norms, biases and 1-D tensors are not quantized (F32 from a folder; a GGUF input's
  type kept). Rows whose length is not a whole number of blocks fall back as llama.cpp
  does: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, then F16.

Options:
  --type T       the weight type (required)
  --threads N    threads that quantize (default: the CPUs available)
  --force        replace OUT when it exists
  --offline      with IN hf:...: only the model cache, no download (also
                 CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1)
  --config FILE  options from a JSON or YAML file (keys: the long names)
  -h, --help     this help

Every option can also be set as CTXR_<OPTION> (e.g. CTXR_TYPE=q8_0) or in
--config FILE; the command line wins over the environment, which wins over the file.

OUT appears only when complete (written to a temporary file, then renamed).
The last line on stdout is a JSON summary: tensors, bytes, seconds, types.
Exit codes: 0 success, 2 bad usage or unusable input, 1 other failure.
`;

const COMMAND = "model quantize";
const FLAGS: FlagSpec = {
  type: { type: "string" },
  threads: { type: "string" },
  force: { type: "boolean" },
  offline: { type: "boolean" },
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
};

export async function modelQuantizeCommand(args: string[], io: CommandIo & { err?(text: string): void }): Promise<number> {
  const flags = parseSourcedFlags(args, FLAGS, COMMAND, process.env, {}, true);
  if (flags.values.help) {
    io.out(MODEL_QUANTIZE_HELP);
    return EXIT_OK;
  }
  return withFlagSources(flags, () => quantizeWithFlags(flags, io));
}

async function quantizeWithFlags(flags: SourcedFlags, io: CommandIo & { err?(text: string): void }): Promise<number> {
  if (flags.positionals.length !== 2) throw new UsageError(`expected IN and OUT, got ${flags.positionals.length} argument${flags.positionals.length === 1 ? "" : "s"}`, COMMAND);
  const [model, output] = flags.positionals as [string, string];
  const rawType = flags.values.type;
  if (typeof rawType !== "string") throw new UsageError("missing --type", COMMAND);
  const type = rawType.toLowerCase() as QuantizeType;
  if (!(QUANTIZE_TYPES as readonly string[]).includes(type)) throw new UsageError(`--type must be one of ${QUANTIZE_TYPES.join(", ")}, got '${rawType}'`, COMMAND);
  const threads = integerFlag(flags, "threads", COMMAND, 1) ?? availableParallelism();
  const err = io.err ?? ((text: string) => void process.stderr.write(text));
  const local = await localModelPath(model, { offline: Boolean(flags.values.offline), offlineFrom: flags.origins.offline, command: COMMAND, terminal: io.progress, err });
  const input = local.path;
  checkOutput(input, output, Boolean(flags.values.force));

  const progress = lazyProgressBar(io.progress);
  let summary;
  try {
    summary = await quantizeModel({ input, output, type, threads, ...(local.repoName === null ? {} : { modelName: local.repoName }), onProgress: (done, total) => progress.onProgress("quantize", done, total) });
  } catch (error) {
    if (
      error instanceof QuantizeInputError ||
      error instanceof GgufError ||
      error instanceof GgufMetadataError ||
      error instanceof SafetensorsError ||
      error instanceof ModelConversionError ||
      error instanceof TokenizerConversionError ||
      error instanceof GgmlTypeError
    ) {
      throw new InputError(error.message);
    }
    throw error;
  } finally {
    progress.stop();
  }
  io.out(`ctxr: wrote ${output}: ${summary.tensors} tensors (${Object.entries(summary.types).map(([t, n]) => `${n} ${t}`).join(", ")}), ${summary.bytes} bytes in ${summary.seconds.toFixed(2)} s\n`);
  io.out(JSON.stringify({ out: output, type, ...summary, seconds: Math.round(summary.seconds * 1000) / 1000 }) + "\n");
  return EXIT_OK;
}

function checkOutput(input: string, output: string, force: boolean): void {
  if (resolve(input) === resolve(output)) throw new UsageError("OUT must differ from IN", COMMAND);
  try {
    const stats = statSync(output);
    if (stats.isDirectory()) throw new InputError(`${output} is a folder; OUT must be a file path`);
    if (!force) throw new InputError(`${output} exists; pass --force to replace it`);
  } catch (error) {
    if (error instanceof InputError) throw error;
  }
  try {
    if (!statSync(dirname(resolve(output))).isDirectory()) throw new Error("not a folder");
  } catch {
    throw new InputError(`cannot write ${output}: its folder ${dirname(resolve(output))} does not exist`);
  }
}
