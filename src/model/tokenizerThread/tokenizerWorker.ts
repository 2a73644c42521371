/**
 * The tokenizer thread's entry (a Bun Worker started by tokenizerThread.ts): the served model's
 * tokenizer loaded once more, here, so that tokenizing a long prompt (about half a second a
 * megabyte) never holds up the request thread. Requests are handled one at a time, in order.
 */
import { ChatTemplateError, ModelTokenizerError, type ModelTokenizer } from "../modelTokenizer.ts";
import { loadSourceTokenizer } from "../sourceTokenizer.ts";
import type { TokenizerErrorKind, TokenizerThreadIn, TokenizerThreadOut } from "./tokenizerThreadMessages.ts";
import { collectGarbage } from "../../runtime/garbageCollector.ts";

declare const self: Worker;

/** Past this many characters a text's garbage is collected as soon as its ids are sent. */
const COLLECT_AFTER_CHARS = 256 * 1024;

let tokenizer: ModelTokenizer | null = null;

function withBos(ids: number[], bos: number | null): Int32Array {
  const start = bos !== null && ids[0] !== bos ? 1 : 0;
  const out = new Int32Array(ids.length + start);
  if (start === 1) out[0] = bos!;
  out.set(ids, start);
  return out;
}

function errorKind(error: unknown): TokenizerErrorKind {
  if (error instanceof ChatTemplateError) return "chat_template";
  if (error instanceof ModelTokenizerError) return "tokenizer";
  return "other";
}

function send(message: TokenizerThreadOut): void {
  self.postMessage(message, message.kind === "ids" ? [message.ids.buffer as ArrayBuffer] : []);
}

async function handle(request: TokenizerThreadIn): Promise<void> {
  if (request.kind === "init") {
    try {
      tokenizer = (await loadSourceTokenizer(request.source)).tokenizer;
      send({ kind: "ready" });
    } catch (error) {
      send({ kind: "failed", message: String((error as Error)?.message ?? error) });
    }
    return;
  }
  try {
    if (request.kind === "text") {
      send({ kind: "text", id: request.id, text: tokenizer!.exactText(Array.from(request.ids)) });
      return;
    }
    if (request.kind === "render") {
      send({ kind: "text", id: request.id, text: tokenizer!.applyChatTemplate(request.messages, request.options) });
      return;
    }
    const text = request.kind === "encode" ? request.text : tokenizer!.applyChatTemplate(request.messages, request.options);
    send({ kind: "ids", id: request.id, ids: withBos(tokenizer!.encode(text), request.bos) });
    // The tokenizer's working memory is ~150 times a long text's: given back now, not whenever this thread's heap next grows.
    if (text.length > COLLECT_AFTER_CHARS) collectGarbage();
  } catch (error) {
    send({ kind: "error", id: request.id, error: errorKind(error), message: String((error as Error)?.message ?? error) });
  }
}

let queue: Promise<void> = Promise.resolve();

self.onmessage = (event: MessageEvent<TokenizerThreadIn>) => {
  const request = event.data;
  queue = queue.then(() => handle(request));
};
