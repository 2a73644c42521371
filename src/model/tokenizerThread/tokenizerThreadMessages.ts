/**
 * The messages between the request thread (tokenizerThread.ts) and the tokenizer thread
 * (tokenizerWorker.ts). Each request carries an id its one reply repeats; ids travel back as an
 * Int32Array whose buffer is transferred, not copied.
 */
import type { ModelSource } from "../modelSource.ts";
import type { ChatTemplateMessage, ChatTemplateOptions } from "../modelTokenizer.ts";

export type TokenizerThreadIn =
  /** Load the model's tokenizer (once, first message). */
  | { kind: "init"; source: ModelSource }
  /** A text's ids, `bos` first when given and the text did not encode it. */
  | { kind: "encode"; id: number; text: string; bos: number | null }
  /** A chat rendered by the chat template, then encoded (`bos` as for encode). */
  | { kind: "chat"; id: number; messages: ChatTemplateMessage[]; options: ChatTemplateOptions; bos: number | null }
  /** The text ids stand for exactly (ModelTokenizer.exactText). */
  | { kind: "text"; id: number; ids: Int32Array }
  /** A chat rendered by the chat template (not encoded). */
  | { kind: "render"; id: number; messages: ChatTemplateMessage[]; options: ChatTemplateOptions };

/** Which error a failed request raised, so the request thread raises the same class. */
export type TokenizerErrorKind = "chat_template" | "tokenizer" | "other";

export type TokenizerThreadOut =
  | { kind: "ready" }
  /** The tokenizer could not be loaded. */
  | { kind: "failed"; message: string }
  | { kind: "ids"; id: number; ids: Int32Array }
  | { kind: "text"; id: number; text: string | null }
  | { kind: "error"; id: number; error: TokenizerErrorKind; message: string };
