/**
 * The tokenizer side of a model source (modelSource.ts): a Hugging Face folder's tokenizer
 * files, or a GGUF file's tokenizer metadata. For a GGUF file the header is read (never the
 * tensor data) and the model config checked, so a damaged file or an architecture the runner
 * does not run fails here with the reader's error naming the key or tensor, before any runner
 * starts. Used by the commands that take --model besides `ctxr serve` (calibrate-sparse) and
 * by scripts/perplexity.ts.
 */
import { completionsAddBos } from "./completionPrompt.ts";
import { ggufModelConfig } from "./gguf/ggufModelConfig.ts";
import { ggufModelTensors, readGgufParts } from "./gguf/ggufSplit.ts";
import { ggufModelTokenizer } from "./gguf/ggufTokenizer.ts";
import type { ModelSource } from "./modelSource.ts";
import { loadModelTokenizer, type ModelTokenizer } from "./modelTokenizer.ts";

export interface SourceTokenizer {
  tokenizer: ModelTokenizer;
  /** Whether plain-text completion prompts start with BOS. */
  addBos: boolean;
}

export async function loadSourceTokenizer(source: ModelSource): Promise<SourceTokenizer> {
  if (source.kind === "folder") {
    const tokenizer = await loadModelTokenizer(source.path);
    return { tokenizer, addBos: await completionsAddBos(source.path, tokenizer) };
  }
  const parts = readGgufParts(source.path);
  const header = parts[0]!.header;
  ggufModelConfig(header.metadata, ggufModelTensors(parts));
  return ggufModelTokenizer(header.metadata, source.path);
}
