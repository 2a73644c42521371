/**
 * What `--model` names: a Hugging Face model folder (config.json, *.safetensors, tokenizer
 * files), a GGUF file (or the first part of a split one, PREFIX-00001-of-0000N.gguf), or a folder
 * holding exactly one GGUF model (a file, or the parts of one split) and no safetensors. The
 * model's default id in the API: the folder's name, or the GGUF file's name without .gguf (and
 * without a split's part suffix).
 *
 * A ModelSourceError says what is wrong: the path is missing, a file that is not .gguf, a
 * folder with several .gguf files or with both GGUF and safetensors files (naming them), or
 * a folder with neither a .gguf file nor config.json.
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { SPLIT_PART_NAME } from "./gguf/ggufSplit.ts";

export type ModelSource =
  | { kind: "folder"; /** Absolute path of the folder. */ path: string; /** Default served model id. */ name: string }
  | { kind: "gguf"; /** Absolute path of the .gguf file. */ path: string; name: string };

export class ModelSourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ModelSourceError";
  }
}

const isGguf = (name: string): boolean => name.toLowerCase().endsWith(".gguf");
const ggufName = (file: string): string => basename(file).replace(SPLIT_PART_NAME, "").replace(/\.gguf$/i, "");

/** A folder's GGUF models: each file, except that a split's parts count as one, its first part. */
function ggufModels(ggufs: readonly string[]): string[] {
  return ggufs.filter((name) => {
    const part = SPLIT_PART_NAME.exec(name);
    return part === null || Number(part[1]) === 1;
  });
}

/** Resolves --model; a ModelSourceError when it names no model ctxr can load. */
export function resolveModelSource(model: string): ModelSource {
  const path = resolve(model);
  if (!existsSync(path)) {
    // "meta-llama/Llama-3.2-1B-Instruct" is how people name a model on the hub.
    const hubHint = /^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/.test(model) && !isGguf(model) ? `; for the model ${model} on the Hugging Face Hub, write hf:${model}` : "";
    throw new ModelSourceError(`model ${isGguf(path) ? "file" : "folder"} ${model} does not exist${hubHint}`);
  }
  const stat = statSync(path);
  if (stat.isFile()) {
    if (isGguf(path)) return { kind: "gguf", path, name: ggufName(path) };
    throw new ModelSourceError(`${model} is a file but not a .gguf file (--model takes a Hugging Face model folder, a .gguf file, or a folder holding one .gguf file)`);
  }
  if (!stat.isDirectory()) throw new ModelSourceError(`${model} is neither a folder nor a .gguf file`);
  const files = readdirSync(path, { withFileTypes: true })
    .filter((entry) => entry.isFile() || entry.isSymbolicLink())
    .map((entry) => entry.name)
    .sort();
  const ggufs = ggufModels(files.filter(isGguf));
  const parts = files.filter((name) => SPLIT_PART_NAME.test(name));
  if (ggufs.length === 0 && parts.length > 0) throw new ModelSourceError(`${model} holds parts of a split GGUF model (${parts.join(", ")}) but not its first part, PREFIX-00001-of-NNNNN.gguf`);
  const safetensors = files.filter((name) => name.endsWith(".safetensors"));
  if (ggufs.length > 1) throw new ModelSourceError(`${model} holds ${ggufs.length} GGUF files (${ggufs.join(", ")}); give --model the one to serve`);
  if (ggufs.length === 1 && safetensors.length > 0) {
    throw new ModelSourceError(`${model} holds both a GGUF file (${ggufs[0]}) and safetensors files (${safetensors.join(", ")}); give --model the .gguf file, or a folder with one kind`);
  }
  if (ggufs.length === 1) {
    const file = join(path, ggufs[0]!);
    return { kind: "gguf", path: file, name: ggufName(file) };
  }
  if (!files.includes("config.json")) throw new ModelSourceError(`${model} has no config.json and no .gguf file; is it a Hugging Face model folder?`);
  return { kind: "folder", path, name: basename(path) };
}
