/**
 * What instances sharing state through Redis tell each other: the context service's change
 * records (the same records its journal keeps) and the proxy's remembered histories.
 */
import type { ChangeRecord } from "../online/serviceChanges.ts";

export type SharedChange =
  | { c: "service"; r: ChangeRecord }
  | { c: "history"; conversation: string; messages: [key: string, content: unknown][] };

/**
 * A cell is one value two instances may write concurrently: a block's label in a
 * conversation, or what a message was forwarded as. Every replica keeps the value of the cell's
 * earliest write in the log's order.
 */
export function cellsOf(change: SharedChange): string[] {
  if (change.c === "history") return change.messages.map(([key]) => historyCell(change.conversation, key));
  if (change.r.op === "conversation") {
    const conversation = change.r.conversation;
    return change.r.entries.map(([key]) => labelCell(conversation, key));
  }
  return [];
}

export function labelCell(conversation: string, key: string): string {
  return `l\u0000${conversation}\u0000${key}`;
}

export function historyCell(conversation: string, key: string): string {
  return `h\u0000${conversation}\u0000${key}`;
}
