/**
 * An OpenAI-compatible answer as fake engines send it: one JSON body, or server-sent events (a
 * role chunk for chat, one chunk per piece of the answer, a finish chunk, a usage chunk when
 * asked for, then [DONE]).
 */
import { sleep } from "../../src/runtime/sleep.ts";

export interface OpenAiUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export interface OpenAiAnswer {
  id: string;
  model: string;
  chat: boolean;
  /** The answer, in the pieces a stream sends (joined: the whole answer). */
  pieces: readonly string[];
  usage: OpenAiUsage;
  stream: boolean;
  /** stream_options.include_usage */
  includeUsage: boolean;
  /** Between stream chunks (default 0). */
  chunkDelayMs?: number;
  /** Called once the last byte is written. */
  finished?: () => void;
}

const CREATED = 1_700_000_000;

export function openaiAnswer(answer: OpenAiAnswer): Response {
  const { id, model, chat, pieces, usage } = answer;
  const text = pieces.join("");
  if (!answer.stream) {
    const choice = chat ? { index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" } : { index: 0, text, finish_reason: "stop" };
    answer.finished?.();
    return Response.json({ id, object: chat ? "chat.completion" : "text_completion", created: CREATED, model, choices: [choice], usage });
  }
  const object = chat ? "chat.completion.chunk" : "text_completion";
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => `data: ${JSON.stringify({ id, object, created: CREATED, model, choices, ...extra })}\n\n`;
  const events: string[] = [];
  if (chat) events.push(chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]));
  for (const piece of pieces) events.push(chunk([chat ? { index: 0, delta: { content: piece }, finish_reason: null } : { index: 0, text: piece, finish_reason: null }]));
  events.push(chunk([chat ? { index: 0, delta: {}, finish_reason: "stop" } : { index: 0, text: "", finish_reason: "stop" }]));
  if (answer.includeUsage) events.push(chunk([], { usage }));
  events.push("data: [DONE]\n\n");
  const encoder = new TextEncoder();
  let next = 0;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (next > 0) await sleep(answer.chunkDelayMs ?? 0);
      controller.enqueue(encoder.encode(events[next++]!));
      if (next === events.length) {
        answer.finished?.();
        controller.close();
      }
    },
  });
  return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
}
