/**
 * The output items of a response as the generated text arrives: a reasoning item (one
 * reasoning_text part, when the server splits the model's reasoning out), message items (one
 * output_text part) and function_call items, with the stream events that build them
 * (output_item.added, content_part.added, reasoning_text.delta/.done, output_text.delta/.done,
 * content_part.done, output_item.done, function_call_arguments.delta/.done). A non-streamed response feeds the whole text and keeps
 * only the items, so both answers are built the same way. Pure: events go to `emit`, without
 * sequence numbers (responseEvents.ts numbers them).
 */
import type { ToolCallPiece } from "../../engine/toolCalls/parsedToolCall.ts";

export interface OutputTextPart {
  type: "output_text";
  text: string;
  annotations: never[];
  logprobs: never[];
}

export interface MessageItem {
  type: "message";
  id: string;
  status: "in_progress" | "completed" | "incomplete";
  role: "assistant";
  content: OutputTextPart[];
}

export interface FunctionCallItem {
  type: "function_call";
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  status: "in_progress" | "completed" | "incomplete";
}

export interface ReasoningTextPart {
  type: "reasoning_text";
  text: string;
}

export interface ReasoningItem {
  type: "reasoning";
  id: string;
  status: "in_progress" | "completed" | "incomplete";
  summary: never[];
  content: ReasoningTextPart[];
}

export type OutputItem = ReasoningItem | MessageItem | FunctionCallItem;

export type OutputEvent = { type: string } & Record<string, unknown>;

const hex = (length: number) => crypto.randomUUID().replace(/-/g, "").slice(0, length);
export const itemId = (prefix: "msg" | "fc" | "rs") => `${prefix}_${hex(32)}`;
export const callId = () => `call_${hex(24)}`;

const textPart = (text: string): OutputTextPart => ({ type: "output_text", text, annotations: [], logprobs: [] });

export class ResponseOutputBuilder {
  readonly items: OutputItem[] = [];
  private open: MessageItem | null = null;
  private reasoning: ReasoningItem | null = null;
  /** Content held back while it is only whitespace (it may precede a tool call). */
  private pending = "";

  /**
   * `callsExpected`: the text may hold tool calls; then a message item opens only with the first
   * content that is not whitespace (a call alone makes no empty message).
   */
  constructor(
    private readonly emit: (event: OutputEvent) => void,
    private readonly callsExpected: boolean,
  ) {}

  /** Reasoning text: into the open reasoning item (one opens with the first). */
  pushReasoning(text: string): void {
    if (text === "") return;
    let item = this.reasoning;
    if (item === null) {
      item = { type: "reasoning", id: itemId("rs"), status: "in_progress", summary: [], content: [] };
      this.items.push(item);
      const outputIndex = this.items.length - 1;
      this.emit({ type: "response.output_item.added", output_index: outputIndex, item: { ...item, content: [] } });
      item.content.push({ type: "reasoning_text", text: "" });
      this.emit({ type: "response.content_part.added", item_id: item.id, output_index: outputIndex, content_index: 0, part: { type: "reasoning_text", text: "" } });
      this.reasoning = item;
    }
    item.content[0]!.text += text;
    this.emit({ type: "response.reasoning_text.delta", item_id: item.id, output_index: this.items.indexOf(item), content_index: 0, delta: text });
  }

  push(piece: ToolCallPiece): void {
    if (piece.content !== "" || piece.calls.length > 0) this.closeReasoning("completed");
    if (piece.content !== "") this.addText(piece.content);
    for (const call of piece.calls) this.addCall(call.name, call.arguments);
  }

  /** Closes what is open; `status` "incomplete" when the text was cut at max_output_tokens. A response without items gets an empty message. */
  finish(status: "completed" | "incomplete"): void {
    this.closeReasoning(status);
    if (this.open === null && this.items.length === 0) this.openMessage();
    this.closeMessage(status);
  }

  private addText(text: string): void {
    if (this.open === null) {
      if (this.callsExpected && (this.pending + text).trim() === "") {
        this.pending += text;
        return;
      }
      this.openMessage();
      text = this.pending + text;
      this.pending = "";
    }
    const message = this.open!;
    message.content[0]!.text += text;
    this.emit({ type: "response.output_text.delta", item_id: message.id, output_index: this.items.length - 1, content_index: 0, delta: text, logprobs: [] });
  }

  private addCall(name: string, args: string): void {
    this.closeMessage("completed");
    this.pending = "";
    const item: FunctionCallItem = { type: "function_call", id: itemId("fc"), call_id: callId(), name, arguments: "", status: "in_progress" };
    this.items.push(item);
    const outputIndex = this.items.length - 1;
    this.emit({ type: "response.output_item.added", output_index: outputIndex, item: { ...item } });
    item.arguments = args;
    this.emit({ type: "response.function_call_arguments.delta", item_id: item.id, output_index: outputIndex, delta: args });
    this.emit({ type: "response.function_call_arguments.done", item_id: item.id, output_index: outputIndex, name, arguments: args });
    item.status = "completed";
    this.emit({ type: "response.output_item.done", output_index: outputIndex, item: { ...item } });
  }

  private closeReasoning(status: "completed" | "incomplete"): void {
    const item = this.reasoning;
    if (item === null) return;
    this.reasoning = null;
    const outputIndex = this.items.indexOf(item);
    const text = item.content[0]!.text;
    this.emit({ type: "response.reasoning_text.done", item_id: item.id, output_index: outputIndex, content_index: 0, text });
    this.emit({ type: "response.content_part.done", item_id: item.id, output_index: outputIndex, content_index: 0, part: { type: "reasoning_text", text } });
    item.status = status;
    this.emit({ type: "response.output_item.done", output_index: outputIndex, item: { ...item, content: [{ type: "reasoning_text", text }] } });
  }

  private openMessage(): void {
    const message: MessageItem = { type: "message", id: itemId("msg"), status: "in_progress", role: "assistant", content: [] };
    this.items.push(message);
    const outputIndex = this.items.length - 1;
    this.emit({ type: "response.output_item.added", output_index: outputIndex, item: { ...message, content: [] } });
    message.content.push(textPart(""));
    this.emit({ type: "response.content_part.added", item_id: message.id, output_index: outputIndex, content_index: 0, part: textPart("") });
    this.open = message;
  }

  private closeMessage(status: "completed" | "incomplete"): void {
    const message = this.open;
    if (message === null) return;
    this.open = null;
    const outputIndex = this.items.indexOf(message);
    const text = message.content[0]!.text;
    this.emit({ type: "response.output_text.done", item_id: message.id, output_index: outputIndex, content_index: 0, text, logprobs: [] });
    this.emit({ type: "response.content_part.done", item_id: message.id, output_index: outputIndex, content_index: 0, part: textPart(text) });
    message.status = status;
    this.emit({ type: "response.output_item.done", output_index: outputIndex, item: { ...message, content: [textPart(text)] } });
  }
}
