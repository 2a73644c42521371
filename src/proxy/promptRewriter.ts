/**
 * Rewrites OpenAI-style requests on their way to an engine so that requests
 * share a prefix and conversations stop resending documents:
 *
 *  - documents come from a `documents` field (rendered as XML elements at the
 *    start of the last new user message) or are already in message text
 *    (XML-tagged or numbered, see documents/textDocuments.ts); a new tool
 *    result is one document;
 *  - across requests, a new turn's documents are reordered through the live
 *    index (longest cached prefix first) with the priority annotation;
 *  - inside a conversation, documents sent in an earlier turn become location
 *    notes, and every earlier message is replaced by exactly the text it was
 *    rewritten to when it was new, so the forwarded history is byte-identical
 *    from turn to turn and the engine's prefix cache keeps matching.
 *
 * Per request, `"ctxr": {"conversation_id"?, "reorder"?: false, "dedup"?: false}`.
 * The conversation id defaults to a hash of the first system and user messages.
 */
import { createHash } from "node:crypto";
import { dedupAnnotation, docLabel, withDefaults } from "../online/annotations.ts";
import { estimateTokens, normalizeBlock, type BlockInput } from "../online/blocks.ts";
import type { ContextService } from "../online/contextService.ts";
import { RequestError } from "../http/requestError.ts";
import { DEFAULT_BUDGETS } from "../online/stateBudgets.ts";
import { findTextDocuments, renderTextDocuments } from "./documents/textDocuments.ts";
import { HistoryStore } from "../online/historyStore.ts";
import { renderDocumentsField, type FieldDocument } from "../chat/documentsField.ts";

export interface RewriteResult {
  body: Record<string, unknown>;
  requestId: string | null;
  documentKeys: string[];
  documents: number;
  deduplicated: number;
  receivedTokens: number;
  forwardedTokens: number;
  estimatedCachedTokens: number;
  /** The live index's estimate had the documents gone in the order the client sent them. */
  inputOrderCachedTokens: number;
  /**
   * Call once the engine accepted the request: records the turn's documents as
   * sent in the conversation and remembers the rewritten messages. A request no
   * engine took is never committed, so its retry is rewritten afresh.
   */
  commit(): void;
  /** Resolves once the index changes of this rewrite (and all before) are on disk. */
  durable(): Promise<void>;
}

export interface PromptRewriterOptions {
  /** Template of one `documents` entry: {id}, {title}, {text}; default an XML element. */
  documentTemplate?: string;
  /** Conversations whose rewritten history is remembered (least recently used forgotten). */
  maxConversations?: number;
  /** Estimated heap bytes of the remembered histories (default DEFAULT_BUDGETS.historyBytes; null: unlimited). */
  maxHistoryBytes?: number | null;
  /** The histories to use (state shared with other instances owns them); else a store of its own. */
  histories?: HistoryStore;
  /** Counts a text's tokens for receivedTokens and forwardedTokens (default: estimateTokens, 4 characters a token). */
  countTokens?: (text: string) => number;
}

const NO_DEFAULTS = { blockTokens: 1 };

interface CtxrOptions {
  conversationId: string | null;
  reorder: boolean;
  dedup: boolean;
}

/** What one request will have sent, recorded only by commit(). */
interface Turn {
  conversationId: string | null;
  ctxr: CtxrOptions;
  /** Documents this request sends in full, with their labels (also checked for repeats within the request). */
  sent: Map<string, [block: BlockInput, label: string]>;
  /** Messages to remember as forwarded: key -> content. */
  history: [key: string, content: unknown][];
}

interface Message {
  role?: unknown;
  content?: unknown;
  tool_call_id?: unknown;
  [key: string]: unknown;
}

/** What rewriting one piece of text produced. */
interface TextOutcome {
  text: string;
  requestId: string | null;
  keys: string[];
  documents: number;
  deduplicated: number;
  cachedTokens: number;
  inputOrderCachedTokens: number;
}

export class PromptRewriter {
  /** Conversation -> (hash of an original message -> its rewritten content). */
  readonly histories: HistoryStore;

  constructor(
    private readonly service: ContextService,
    private readonly options: PromptRewriterOptions = {},
  ) {
    this.histories =
      options.histories ??
      new HistoryStore({
        maxConversations: options.maxConversations,
        maxBytes: options.maxHistoryBytes === undefined ? DEFAULT_BUDGETS.historyBytes : options.maxHistoryBytes,
      });
  }

  async rewriteChat(body: Record<string, unknown>): Promise<RewriteResult> {
    const ctxr = parseCtxrOptions(body.ctxr);
    const fieldDocuments = parseDocumentsField(body.documents);
    const forwarded: Record<string, unknown> = { ...body };
    delete forwarded.ctxr;
    delete forwarded.documents;
    if (!Array.isArray(body.messages)) return this.result(forwarded, newTurn(null, ctxr));

    const messages = body.messages as Message[];
    const turn = newTurn(ctxr.conversationId ?? deriveConversationId(messages), ctxr);
    const result = this.result(forwarded, turn);
    const conversationId = turn.conversationId!;
    const firstNew = messages.findLastIndex((m) => m?.role === "assistant") + 1;
    const rendered = fieldDocuments.length > 0 ? renderDocumentsField(fieldDocuments, this.options.documentTemplate) : null;
    let documentsAt = messages.findLastIndex((m, i) => i >= firstNew && m?.role === "user");
    if (documentsAt < 0) documentsAt = messages.length - 1;

    const out: Message[] = [];
    for (let i = 0; i < messages.length; i++) {
      const message = messages[i]!;
      const received = i === documentsAt && rendered !== null ? withPrefix(message, rendered) : message;
      result.receivedTokens += this.contentTokens(received?.content);
      const key = messageKey(received, i);
      const remembered = this.histories.forwardedAs(conversationId, key);
      if (remembered !== undefined) {
        // Exactly what was forwarded before: earlier turns, or this turn again (a retry).
        out.push({ ...message, content: remembered });
      } else if (i < firstNew) {
        out.push(message);
      } else {
        const rewritten = await this.rewriteNewMessage(received, turn, result);
        // Later turns may resend the message as received or as the client wrote it (documents field not rendered).
        turn.history.push([key, rewritten.content]);
        if (received !== message) turn.history.push([messageKey(message, i), rewritten.content]);
        out.push(rewritten);
      }
      result.forwardedTokens += this.contentTokens(out[i]!.content);
    }
    forwarded.messages = out;
    return result;
  }

  async rewriteCompletion(body: Record<string, unknown>): Promise<RewriteResult> {
    const ctxr = parseCtxrOptions(body.ctxr);
    const forwarded: Record<string, unknown> = { ...body };
    delete forwarded.ctxr;
    const turn = newTurn(ctxr.conversationId, ctxr);
    const result = this.result(forwarded, turn);
    if (typeof body.prompt !== "string") return result;
    result.receivedTokens = this.textTokens(body.prompt);
    const outcome = await this.rewriteText(body.prompt, turn);
    forwarded.prompt = outcome.text;
    addOutcome(result, outcome);
    result.forwardedTokens = this.textTokens(outcome.text);
    return result;
  }

  private result(body: Record<string, unknown>, turn: Turn): RewriteResult {
    return {
      body,
      requestId: null,
      documentKeys: [],
      documents: 0,
      deduplicated: 0,
      receivedTokens: 0,
      forwardedTokens: 0,
      estimatedCachedTokens: 0,
      inputOrderCachedTokens: 0,
      commit: () => {
        if (turn.conversationId === null) return;
        this.histories.remember(turn.conversationId, turn.history);
        if (turn.ctxr.dedup) this.service.recordSent(turn.conversationId, [...turn.sent.values()]);
      },
      durable: () => this.service.durable(),
    };
  }

  private async rewriteNewMessage(message: Message, turn: Turn, result: RewriteResult): Promise<Message> {
    const content = message?.content;
    if (typeof content === "string") {
      const outcome = await this.rewriteText(content, turn);
      if (outcome.documents === 0 && message.role === "tool") return this.rewriteToolResult(message, content, turn, result);
      addOutcome(result, outcome);
      return outcome.text === content ? message : { ...message, content: outcome.text };
    }
    if (Array.isArray(content)) {
      const parts: unknown[] = [];
      for (const part of content) {
        if (part !== null && typeof part === "object" && (part as { type?: unknown }).type === "text" && typeof (part as { text?: unknown }).text === "string") {
          const outcome = await this.rewriteText((part as { text: string }).text, turn);
          addOutcome(result, outcome);
          parts.push(outcome.documents === 0 ? part : { ...(part as object), text: outcome.text });
        } else parts.push(part);
      }
      return { ...message, content: parts };
    }
    return message;
  }

  /** A tool result without recognisable documents is one document: dedup only (tool messages cannot move). */
  private rewriteToolResult(message: Message, content: string, turn: Turn, result: RewriteResult): Message {
    if (!turn.ctxr.dedup || turn.conversationId === null || content.trim() === "") return message;
    const block: BlockInput = { text: content };
    result.documents++;
    const earlier = this.earlierLabels(turn, [block])[0];
    if (earlier !== undefined) {
      result.deduplicated++;
      return { ...message, content: dedupAnnotation(withDefaults(undefined), earlier) };
    }
    const label = `[Tool result ${typeof message.tool_call_id === "string" ? message.tool_call_id : "?"}]`;
    turn.sent.set(keyOf(block), [block, label]);
    return message;
  }

  private async rewriteText(text: string, turn: Turn): Promise<TextOutcome> {
    const found = findTextDocuments(text);
    const none: TextOutcome = { text, requestId: null, keys: [], documents: 0, deduplicated: 0, cachedTokens: 0, inputOrderCachedTokens: 0 };
    const { ctxr } = turn;
    if (found === null || (!ctxr.reorder && !ctxr.dedup)) return found === null ? none : { ...none, documents: found.documents.length };
    const blocks: BlockInput[] = found.documents.map((d) => ({ text: d.content }));
    const templates = withDefaults(undefined);
    const dedupOn = ctxr.dedup && turn.conversationId !== null;
    const earlier = dedupOn ? this.earlierLabels(turn, blocks) : blocks.map(() => undefined);
    const notes = new Map<number, string>();
    const fresh: number[] = [];
    earlier.forEach((label, i) => (label === undefined ? fresh.push(i) : notes.set(i, dedupAnnotation(templates, label))));

    let order: number[];
    let annotation: string | null = null;
    let requestId: string | null = null;
    let cachedTokens = 0;
    let inputOrderCachedTokens = 0;
    if (ctxr.reorder && fresh.length > 0) {
      // Fresh documents first (longest cached prefix first), then the notes for documents sent before.
      const { results } = await this.service.reorder([fresh.map((i) => blocks[i]!)], undefined, undefined, { deferDurability: true });
      const reordered = results[0]!;
      order = [...reordered.order.map((j) => fresh[j]!), ...notes.keys()];
      annotation = fresh.length > 1 ? reordered.annotation : null;
      requestId = reordered.request_id;
      cachedTokens = reordered.prefix_tokens;
      inputOrderCachedTokens = reordered.input_order_prefix_tokens;
    } else {
      // Dedup only: documents stay where they are; labels follow their positions.
      order = blocks.map((_, i) => i);
    }
    if (dedupOn) order.forEach((i, position) => notes.has(i) || turn.sent.set(keyOf(blocks[i]!), [blocks[i]!, docLabel(templates, position)]));
    const keys = order.filter((i) => !notes.has(i)).map((i) => keyOf(blocks[i]!));
    return { text: renderTextDocuments(found, order, notes, annotation), requestId, keys, documents: blocks.length, deduplicated: notes.size, cachedTokens, inputOrderCachedTokens };
  }

  /** Labels of blocks sent in an earlier turn, or earlier in this request. */
  private earlierLabels(turn: Turn, blocks: BlockInput[]): (string | undefined)[] {
    const recorded = this.service.sentBefore(turn.conversationId!, blocks);
    return blocks.map((block, i) => recorded[i] ?? turn.sent.get(keyOf(block))?.[1]);
  }

  private textTokens(text: string): number {
    return (this.options.countTokens ?? estimateTokens)(text);
  }

  private contentTokens(content: unknown): number {
    if (typeof content === "string") return content === "" ? 0 : this.textTokens(content);
    if (!Array.isArray(content)) return 0;
    let tokens = 0;
    for (const part of content) if (typeof (part as { text?: unknown })?.text === "string") tokens += this.textTokens((part as { text: string }).text);
    return tokens;
  }

  /** Forgets every remembered history (with POST /v1/reset). */
  reset(): void {
    this.histories.clear();
  }

}

function newTurn(conversationId: string | null, ctxr: CtxrOptions): Turn {
  return { conversationId, ctxr, sent: new Map(), history: [] };
}

function keyOf(block: BlockInput): string {
  return normalizeBlock(block, NO_DEFAULTS).key;
}

function addOutcome(result: RewriteResult, outcome: TextOutcome): void {
  result.documents += outcome.documents;
  result.deduplicated += outcome.deduplicated;
  result.estimatedCachedTokens += outcome.cachedTokens;
  result.inputOrderCachedTokens += outcome.inputOrderCachedTokens;
  result.documentKeys.push(...outcome.keys);
  result.requestId ??= outcome.requestId;
}

function parseCtxrOptions(value: unknown): CtxrOptions {
  if (value === undefined || value === null) return { conversationId: null, reorder: true, dedup: true };
  if (typeof value !== "object" || Array.isArray(value)) throw new RequestError("ctxr", "must be an object like {\"conversation_id\"?, \"reorder\"?, \"dedup\"?}");
  const { conversation_id: conversationId, reorder, dedup, ...rest } = value as Record<string, unknown>;
  const unknownKey = Object.keys(rest)[0];
  if (unknownKey !== undefined) throw new RequestError(`ctxr.${unknownKey}`, "unknown option (expected conversation_id, reorder, dedup)");
  if (conversationId !== undefined && (typeof conversationId !== "string" || conversationId === "" || conversationId.length > 256)) {
    throw new RequestError("ctxr.conversation_id", "must be a string of 1 to 256 characters");
  }
  for (const [name, flag] of [["reorder", reorder], ["dedup", dedup]] as const) {
    if (flag !== undefined && typeof flag !== "boolean") throw new RequestError(`ctxr.${name}`, "must be true or false");
  }
  return { conversationId: (conversationId as string | undefined) ?? null, reorder: reorder !== false, dedup: dedup !== false };
}

function parseDocumentsField(value: unknown): FieldDocument[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new RequestError("documents", 'must be a list of {"id"?, "title"?, "text"}');
  return value.map((entry, i) => {
    if (entry === null || typeof entry !== "object" || Array.isArray(entry)) throw new RequestError(`documents[${i}]`, 'must be an object {"id"?, "title"?, "text"}');
    const { id, title, text } = entry as Record<string, unknown>;
    if (typeof text !== "string") throw new RequestError(`documents[${i}].text`, "must be a string");
    if (id !== undefined && typeof id !== "string" && typeof id !== "number") throw new RequestError(`documents[${i}].id`, "must be a string or a number");
    if (title !== undefined && typeof title !== "string") throw new RequestError(`documents[${i}].title`, "must be a string");
    return { id: id as string | number | undefined, title: title as string | undefined, text };
  });
}

function deriveConversationId(messages: Message[]): string {
  const system = messages.find((m) => m?.role === "system");
  const user = messages.find((m) => m?.role === "user");
  return `auto-${hash(JSON.stringify([system?.content ?? null, user?.content ?? null]))}`;
}

/** A message's identity in its conversation: its position and what it says (history only grows at the end). */
function messageKey(message: Message, position: number): string {
  return hash(JSON.stringify([position, message?.role ?? null, message?.content ?? null, message?.tool_call_id ?? null]));
}

function withPrefix(message: Message, rendered: string): Message {
  const content = message?.content;
  if (typeof content === "string") return { ...message, content: content === "" ? rendered : `${rendered}\n\n${content}` };
  if (Array.isArray(content)) return { ...message, content: [{ type: "text", text: rendered }, ...content] };
  return { ...message, content: rendered };
}

function hash(text: string): string {
  return createHash("sha256").update(text).digest("hex").slice(0, 32);
}
