/**
 * Multi-turn chat against `ctxr serve --model` for scripts/bench-prefix-cache.ts: conversations
 * of the multi-turn workload replayed turn by turn, each turn's answer appended to the history
 * of the next, and per turn what the prefix cache could have found and did find.
 *
 * History kinds:
 * - `chat`: /v1/chat/completions with the messages; the answer goes back as an assistant
 *   message, so the next prompt holds the answer as the chat template and tokenizer render its
 *   text again (which need not be the tokens the model generated);
 * - `tokens`: /v1/completions with token ids: the next prompt is the previous prompt, the
 *   generated ids themselves, then the template's text for the new user turn, so the history
 *   round-trips by construction.
 *
 * For turn n ≥ 2 the previous turn's KV covers its prompt and its answer but the last generated
 * token (never fed back); `reachable` is the part of turn n's prompt that starts with exactly
 * those tokens, in whole blocks and leaving the last prompt token to compute: the most any
 * prefix cache can report.
 */
import type { ChatTemplateMessage, ModelTokenizer } from "../src/model/modelTokenizer.ts";
import { renderDocumentsField } from "../src/chat/documentsField.ts";
import { commonPrefixLength } from "./benchKit.ts";
import { documentText } from "./benchProxyUpstream.ts";
import { type StreamedAnswer, streamAnswer } from "./benchStreamedAnswer.ts";

export type HistoryKind = "chat" | "tokens";

export interface WorkloadTurn {
  conv: number;
  turn: number;
  blocks: number[];
}

export interface ChatReplayOptions {
  model: string;
  systemPrompt: string;
  docsPerTurn: number;
  docChars: number;
  maxTokens: number;
  blockSize: number;
  history: HistoryKind;
}

export interface TurnRecord {
  conv: number;
  turn: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  computedTokens: number;
  ttftClientMs: number;
  ttftServerMs: number;
  /** The prompt ids counted here equal the engine's prompt_tokens. */
  promptCountAgrees: boolean;
  /** n ≥ 2: the previous turn's prompt + completion tokens. */
  previousTokens: number | null;
  /** n ≥ 2: the block-floored common prefix with the previous turn's written KV. */
  reachable: number | null;
  /** n ≥ 2: the first differing position, counted from the previous prompt's end. */
  divergesAt: number | null;
  /** n ≥ 2, first differing tokens: what the previous turn generated vs. what this prompt holds there. */
  divergence: { generated: string; prompt: string } | null;
  answer: StreamedAnswer;
}

interface ConversationState {
  messages: ChatTemplateMessage[];
  promptIds: number[];
  generatedIds: number[];
  answerText: string;
}

/** A turn's user message: its first `docsPerTurn` retrieved documents, then a question. */
export function userTurnText(turn: WorkloadTurn, docsPerTurn: number, docChars: number): string {
  const documents = turn.blocks.slice(0, docsPerTurn).map((id) => ({ id, text: documentText(id, docChars) }));
  return `${renderDocumentsField(documents)}\n\nQuestion ${turn.turn} of conversation ${turn.conv}: what do these documents have in common?`;
}

/** Replays `turns` (in arrival order) against one server; `onTurn` sees each record as it ends. */
export class ChatReplay {
  private readonly states = new Map<number, ConversationState>();
  private readonly idsOfBytes = new Map<string, number>();
  private readonly idsOfText = new Map<string, number>();
  readonly records: TurnRecord[] = [];

  constructor(
    private readonly url: string,
    private readonly tokenizer: ModelTokenizer,
    private readonly options: ChatReplayOptions,
  ) {
    for (let id = tokenizer.vocabSize - 1; id >= 0; id--) {
      this.idsOfBytes.set(tokenizer.tokenBytes(id).join(","), id);
      this.idsOfText.set(tokenizer.tokenText(id), id);
    }
  }

  async turn(turn: WorkloadTurn): Promise<TurnRecord> {
    const { tokenizer, options } = this;
    const previous = this.states.get(turn.conv);
    const user: ChatTemplateMessage = { role: "user", content: userTurnText(turn, options.docsPerTurn, options.docChars) };
    const history: ChatTemplateMessage[] = previous === undefined ? [{ role: "system", content: options.systemPrompt }] : [...previous.messages, { role: "assistant", content: previous.answerText }];
    const messages = [...history, user];
    const rendered = tokenizer.applyChatTemplate(messages);
    let promptIds: number[];
    if (options.history === "chat" || previous === undefined) {
      promptIds = tokenizer.encode(rendered);
    } else {
      const before = tokenizer.applyChatTemplate(history, { addGenerationPrompt: false });
      if (!rendered.startsWith(before)) throw new Error("the chat template does not extend the history it rendered before; use --history chat");
      promptIds = [...previous.promptIds, ...previous.generatedIds, ...tokenizer.encode(rendered.slice(before.length))];
    }
    const common = { model: options.model, max_tokens: options.maxTokens, temperature: 0 };
    const answer =
      options.history === "chat" ? await streamAnswer(this.url, "chat", { ...common, messages }) : await streamAnswer(this.url, "completions", { ...common, prompt: promptIds });
    const generatedIds = answer.tokens.map((t) => (t.bytes === null ? this.idsOfText.get(t.token) : this.idsOfBytes.get(t.bytes.join(","))) ?? -1);
    this.states.set(turn.conv, { messages, promptIds, generatedIds, answerText: answer.text });

    const ctxr = answer.usage.ctxr;
    const record: TurnRecord = {
      conv: turn.conv,
      turn: turn.turn,
      promptTokens: answer.usage.prompt_tokens,
      completionTokens: answer.usage.completion_tokens,
      cachedTokens: answer.usage.prompt_tokens_details?.cached_tokens ?? 0,
      computedTokens: ctxr?.prompt_tokens_computed ?? answer.usage.prompt_tokens,
      ttftClientMs: answer.ttftMs,
      ttftServerMs: ctxr?.ttft_ms ?? Number.NaN,
      promptCountAgrees: promptIds.length === answer.usage.prompt_tokens,
      previousTokens: null,
      reachable: null,
      divergesAt: null,
      divergence: null,
      answer,
    };
    if (previous !== undefined) {
      const written = [...previous.promptIds, ...previous.generatedIds.slice(0, -1)];
      const common = commonPrefixLength(promptIds, written);
      const end = previous.promptIds.length;
      record.previousTokens = end + previous.generatedIds.length;
      record.reachable = Math.floor(Math.min(common, promptIds.length - 1) / options.blockSize) * options.blockSize;
      record.divergesAt = common - end;
      if (common < written.length) {
        const show = (ids: number[]) => JSON.stringify(tokenizer.decode(ids.slice(common, common + 6)));
        record.divergence = { generated: show(written), prompt: show(promptIds) };
      }
    }
    this.records.push(record);
    return record;
  }
}
