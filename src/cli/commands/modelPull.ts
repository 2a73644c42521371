/** `ctxr model pull hf:ORG/REPO[:QUANT|FILE][@REV]`: fetches a model from the Hugging Face Hub into the cache. */
import { DEFAULT_QUANT } from "../../model/hub/hubFileChoice.ts";
import { isHubReference } from "../../model/hub/hubReference.ts";
import { EXIT_OK, UsageError, type FlagSpec, type ParsedFlags } from "../args.ts";
import { parseSourcedFlags, withFlagSources } from "../sourcedFlags.ts";
import { loadHubModel } from "../hubModelLoader.ts";
import type { CommandIo } from "./types.ts";

export const MODEL_PULL_HELP = `Usage: ctxr model pull hf:ORG/REPO[:QUANT|FILE][@REV] [--offline]

Downloads a model from the Hugging Face Hub into the model cache, where
'ctxr serve --model hf:...' finds it (see docs/models-by-name.md):
  hf:ORG/REPO              a GGUF repository: the ${DEFAULT_QUANT} file, else its only
                           GGUF file; a safetensors repository: its folder (config,
                           weights, tokenizer)
  hf:ORG/REPO:QUANT        the GGUF file whose name carries QUANT (e.g. Q8_0)
  hf:ORG/REPO:FILE         that GGUF file of the repository
  ...@REV                  at that branch, tag or commit (default main); each
                           revision has its own snapshot in the cache
A GGUF model split in parts (NAME-00001-of-00003.gguf, ...) is fetched whole:
every part, named by its quantization or any part's name; serve its first part.
Downloads resume after a cut (run the command again) and are checked against
the hub's sha256 before use. A progress bar shows on a terminal. The last line
on stdout is a JSON summary: model, repo, revision, commit, kind, path, files,
fetched_bytes, source.

Options:
  --offline                only the cache: say what is missing rather than download
                           (also CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1)
  --config FILE            options from a JSON or YAML file (keys: the long names)
  -h, --help               this help

Environment:
  HF_TOKEN                 access token for gated or private models
  HF_ENDPOINT              the hub's URL (default https://huggingface.co)
  XDG_CACHE_HOME           the cache is $XDG_CACHE_HOME/ctxr/models
                           (default ~/.cache/ctxr/models)

Exit codes: 0 success, 2 bad usage, 1 the model could not be fetched.
`;

const COMMAND = "model pull";
const FLAGS: FlagSpec = { offline: { type: "boolean" }, config: { type: "string" }, help: { type: "boolean", short: "h" } };

export async function modelPullCommand(args: string[], io: CommandIo & { err?(text: string): void }): Promise<number> {
  const flags = parseSourcedFlags(args, FLAGS, COMMAND, process.env, {}, true);
  if (flags.values.help) {
    io.out(MODEL_PULL_HELP);
    return EXIT_OK;
  }
  return withFlagSources(flags, () => pullWithFlags(flags, io));
}

async function pullWithFlags(flags: ParsedFlags, io: CommandIo & { err?(text: string): void }): Promise<number> {
  if (flags.positionals.length !== 1) throw new UsageError(`give one model, hf:ORG/REPO[:QUANT|FILE][@REV] (got ${flags.positionals.length})`, COMMAND);
  const model = flags.positionals[0]!;
  if (!isHubReference(model)) throw new UsageError(`'${model}' is not a model on the hub: write hf:ORG/REPO[:QUANT|FILE][@REV]`, COMMAND);
  const err = io.err ?? ((text: string) => void process.stderr.write(text));
  const pulled = await loadHubModel(model, { offline: Boolean(flags.values.offline), command: COMMAND, terminal: io.progress, err });
  const bytes = pulled.files.reduce((sum, file) => sum + file.bytes, 0);
  io.out(
    `ctxr: ${model} is in ${pulled.path} (${pulled.files.length} file${pulled.files.length === 1 ? "" : "s"}, ${(bytes / 2 ** 20).toFixed(1)} MiB; ` +
      `${pulled.fetchedBytes === 0 ? "nothing downloaded" : `${(pulled.fetchedBytes / 2 ** 20).toFixed(1)} MiB downloaded`})\n`,
  );
  io.out(
    JSON.stringify({
      model,
      repo: pulled.reference.repo,
      revision: pulled.reference.revision,
      commit: pulled.commit,
      kind: pulled.kind,
      path: pulled.path,
      files: pulled.files,
      fetched_bytes: pulled.fetchedBytes,
      source: pulled.source,
    }) + "\n",
  );
  return EXIT_OK;
}
