/**
 * The prompt token ids an engine will compute for a forwarded request, found by tokenizing it as
 * the engine does (`--tokenizer DIR`: the served model's tokenizer.json and chat template): a
 * chat's messages through the template (with its tools and template variables), a completion's
 * text with BOS where the tokenizer adds one. The proxy looks these up in its mirror of each
 * engine's cache (engineCacheMirror.ts).
 */
import { normalizeChatMessages } from "../chat/chatMessages.ts";
import { completionIds, completionsAddBos } from "../model/completionPrompt.ts";
import { loadModelTokenizer, type ChatTemplateOptions, type ModelTokenizer } from "../model/modelTokenizer.ts";
import { PieceMemoEncoder } from "./pieceMemoEncoder.ts";

export type PromptEndpoint = "chat" | "completions";

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

export class EnginePromptTokenizer {
  private constructor(
    readonly tokenizer: ModelTokenizer,
    private readonly addBos: boolean,
    /** The same ids, faster, for byte-level BPE tokenizers (null: the tokenizer's own encode). */
    private readonly pieces: PieceMemoEncoder | null,
  ) {}

  static async load(dir: string): Promise<EnginePromptTokenizer> {
    const tokenizer = await loadModelTokenizer(dir);
    return new EnginePromptTokenizer(tokenizer, await completionsAddBos(dir, tokenizer), await PieceMemoEncoder.load(dir, tokenizer.encode));
  }

  /** The ids of the request's (first) prompt; null when the body is not one the engine would accept as such. */
  promptIds(endpoint: PromptEndpoint, body: unknown): number[] | null {
    if (!isObject(body)) return null;
    try {
      return endpoint === "chat" ? this.chatIds(body) : this.completionIds(body.prompt);
    } catch {
      return null;
    }
  }

  private chatIds(body: Record<string, unknown>): number[] {
    const options: ChatTemplateOptions = {
      ...(isObject(body.chat_template_kwargs) ? { templateKwargs: body.chat_template_kwargs } : {}),
      ...(Array.isArray(body.tools) && body.tools.length > 0 ? { tools: body.tools } : {}),
      ...(typeof body.add_generation_prompt === "boolean" ? { addGenerationPrompt: body.add_generation_prompt } : {}),
    };
    const text = this.tokenizer.applyChatTemplate(normalizeChatMessages(body.messages), options);
    return this.pieces === null ? this.tokenizer.encode(text) : this.pieces.encode(text);
  }

  private completionIds(prompt: unknown): number[] | null {
    if (typeof prompt === "string") return completionIds(this.tokenizer, this.addBos, prompt);
    if (!Array.isArray(prompt) || prompt.length === 0) return null;
    if (prompt.every((id) => Number.isSafeInteger(id))) return prompt as number[];
    return this.completionIds(prompt[0]);
  }
}
