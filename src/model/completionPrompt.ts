/**
 * A plain-text completion prompt's token ids, as engines build them: the text's tokens, with BOS
 * first when the tokenizer adds one (tokenizer_config.json's add_bos_token, else tokenizer.json's
 * post-processor). The built-in engine and the proxy's engine tokenizer share it.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { ModelTokenizer } from "./modelTokenizer.ts";

/** A plain-text completion prompt's ids: BOS first when `addBos` (completionsAddBos) and the text did not encode it. */
export function completionIds(tokenizer: ModelTokenizer, addBos: boolean, text: string): number[] {
  const ids = tokenizer.promptIds(text);
  const bos = tokenizer.bosTokenId;
  if (addBos && bos !== null && ids[0] !== bos) ids.unshift(bos);
  return ids;
}

/** Whether plain-text completion prompts start with BOS (tokenizer_config.json's add_bos_token, else whether tokenizer.json's post-processor adds it). */
export async function completionsAddBos(dir: string, tokenizer: ModelTokenizer): Promise<boolean> {
  if (tokenizer.bosTokenId === null) return false;
  try {
    const config = JSON.parse(await readFile(join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
    if (typeof config.add_bos_token === "boolean") return config.add_bos_token;
    const json = JSON.parse(await readFile(join(dir, "tokenizer.json"), "utf8")) as Record<string, unknown>;
    const processor = json.post_processor;
    if (processor === null || processor === undefined) return false;
    return JSON.stringify(processor).includes(JSON.stringify(tokenizer.tokenText(tokenizer.bosTokenId)));
  } catch {
    return false;
  }
}
