/**
 * Which files of a hub repository make the model `hf:ORG/REPO[:QUANT|FILE][@REV]` names (pure: from
 * the repository's file list to the files to fetch).
 *
 * - A GGUF repository: `:FILE` names a file; `:QUANT` picks the one GGUF file whose name carries
 *   that quantization (case-insensitive, as a whole word: Q4_K does not match Q4_K_M); without
 *   either, the file carrying DEFAULT_QUANT, else the only GGUF file. Vision projectors
 *   (mmproj*.gguf) are picked only by their file name. A GGUF split in parts (`-00001-of-00003.gguf`)
 *   is chosen by its first part (or any part's name, or its quantization) and brings every part;
 *   one missing from the list is named.
 * - A safetensors repository (config.json and *.safetensors at the top): the folder's weights,
 *   config and tokenizer files.
 * Every refusal names what the repository does hold.
 */
import { SPLIT_PART_NAME, ggufSplitPartPaths } from "../gguf/ggufSplit.ts";
import { HubError } from "./hubErrors.ts";

export const DEFAULT_QUANT = "Q4_K_M";

export type HubFileChoice =
  | { kind: "gguf"; /** Path of the GGUF file in the repository. */ file: string; files: string[] }
  | { kind: "folder"; files: string[] };

const isGguf = (name: string): boolean => name.toLowerCase().endsWith(".gguf");
const baseName = (path: string): string => path.slice(path.lastIndexOf("/") + 1);
const isProjector = (path: string): boolean => baseName(path).toLowerCase().includes("mmproj");

/** The files a safetensors folder needs besides its weights (whichever the repository has). */
const FOLDER_FILES = new Set([
  "config.json",
  "generation_config.json",
  "tokenizer.json",
  "tokenizer_config.json",
  "tokenizer.model",
  "special_tokens_map.json",
  "added_tokens.json",
  "vocab.json",
  "merges.txt",
  "chat_template.jinja",
  "chat_template.json",
]);

/** A GGUF model as the repository stores it: one file, or the parts of a split one. */
interface GgufCandidate {
  /** The file, or the first part of a split. */
  file: string;
  parts: number;
}

function ggufCandidates(files: readonly string[]): GgufCandidate[] {
  const candidates: GgufCandidate[] = [];
  for (const file of files.filter(isGguf)) {
    const split = SPLIT_PART_NAME.exec(file);
    if (split === null) candidates.push({ file, parts: 1 });
    else if (Number(split[1]) === 1) candidates.push({ file, parts: Number(split[2]) });
  }
  return candidates;
}

function describe(candidate: GgufCandidate): string {
  return candidate.parts === 1 ? candidate.file : `${candidate.file} (split in ${candidate.parts} parts)`;
}

/** True when the file's name carries the quantization tag as a whole word (case-insensitive). */
export function carriesQuant(file: string, quant: string): boolean {
  const escaped = quant.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`(^|[-._])${escaped}($|[-.])`, "i").test(baseName(file));
}

function ggufChoice(repo: string, candidate: GgufCandidate, files: readonly string[], where: string): HubFileChoice {
  if (candidate.parts <= 1) return { kind: "gguf", file: candidate.file, files: [candidate.file] };
  const parts = ggufSplitPartPaths(candidate.file, candidate.parts);
  const missing = parts.filter((part) => !files.includes(part));
  if (missing.length > 0) {
    const named = missing.length > 3 ? `${missing.slice(0, 3).join(", ")} and ${missing.length - 3} more` : missing.join(", ");
    throw new HubError(`${repo}: ${candidate.file} is the first of ${candidate.parts} parts of a split GGUF model, but the repository${where} lacks ${missing.length === 1 ? "part" : "parts"} ${named}`);
  }
  return { kind: "gguf", file: candidate.file, files: parts };
}

const listed = (names: readonly string[]): string => (names.length === 0 ? "no files" : names.join(", "));

/**
 * The files to fetch. `repo` labels the messages ("ORG/REPO"); `where` says whose list `files`
 * is ("" for the hub's, or e.g. " (in the cache)").
 */
export function chooseHubFiles(repo: string, files: readonly string[], selector: string | null, where = ""): HubFileChoice {
  const candidates = ggufCandidates(files);
  const models = candidates.filter((candidate) => !isProjector(candidate.file));
  const ggufList = `its GGUF files${where}: ${listed(candidates.map(describe))}`;
  if (selector !== null) {
    const named = files.find((file) => file === selector) ?? files.find((file) => file.toLowerCase() === selector.toLowerCase());
    if (named !== undefined) {
      if (!isGguf(named)) throw new HubError(`${repo}: ${named} is not a GGUF file; a safetensors model is fetched as a whole folder: write hf:${repo} without ':${selector}'`);
      const split = SPLIT_PART_NAME.exec(named);
      if (split === null) return ggufChoice(repo, { file: named, parts: 1 }, files, where);
      // Any part names the whole split.
      const count = Number(split[2]);
      return ggufChoice(repo, { file: named.replace(SPLIT_PART_NAME, `-00001-of-${split[2]}.gguf`), parts: count }, files, where);
    }
    if (isGguf(selector) || selector.includes("/")) throw new HubError(`${repo} has no file ${selector}${where}; ${ggufList}`);
    if (candidates.length === 0) {
      throw new HubError(`${repo} has no GGUF file${where} to pick the quantization '${selector}' from (it holds ${listed(files)}); for a safetensors model write hf:${repo}`);
    }
    const matches = models.filter((candidate) => carriesQuant(candidate.file, selector));
    if (matches.length === 0) throw new HubError(`${repo}: no GGUF file carries the quantization '${selector}'${where}; ${ggufList}`);
    if (matches.length > 1) throw new HubError(`${repo}: the quantization '${selector}' matches ${matches.length} GGUF files${where} (${matches.map(describe).join(", ")}); name one with hf:${repo}:FILE`);
    return ggufChoice(repo, matches[0]!, files, where);
  }
  if (models.length > 0) {
    const preferred = models.filter((candidate) => carriesQuant(candidate.file, DEFAULT_QUANT));
    if (preferred.length === 1) return ggufChoice(repo, preferred[0]!, files, where);
    if (models.length === 1) return ggufChoice(repo, models[0]!, files, where);
    throw new HubError(
      `${repo} holds ${models.length} GGUF models${where} and ${preferred.length === 0 ? "none" : "several"} ${preferred.length === 0 ? "is" : "are"} ${DEFAULT_QUANT}: ` +
        `pick one with hf:${repo}:QUANT or hf:${repo}:FILE; ${ggufList}`,
    );
  }
  const topLevel = files.filter((file) => !file.includes("/"));
  const weights = topLevel.filter((file) => file.endsWith(".safetensors") || file.endsWith(".safetensors.index.json"));
  if (topLevel.includes("config.json") && weights.some((file) => file.endsWith(".safetensors"))) {
    return { kind: "folder", files: topLevel.filter((file) => FOLDER_FILES.has(file) || weights.includes(file)).sort() };
  }
  const pytorchOnly = topLevel.some((file) => file.endsWith(".bin") || file.endsWith(".pt"));
  throw new HubError(
    `${repo} holds neither a GGUF file nor a safetensors model (config.json and *.safetensors)${where}` +
      `${pytorchOnly ? "; its PyTorch .bin weights are not a format ctxr loads" : ""}; it holds ${listed(files)}`,
  );
}
