/**
 * One streamed OpenAI-style request (`/v1/chat/completions` or `/v1/completions`, to ctxr's
 * engine or through its proxy) as a benchmark client sees it: the time to the first token, the
 * text, every generated token with its logprob and top alternatives, and the final usage.
 *
 * Requests ask for logprobs so that every decode step sends a chunk (the engine skips empty text
 * deltas otherwise) and the first token is timed even when it decodes to no text; the first chunk
 * of a chat stream (the role) is sent before the prefill and is not a token.
 */
import type { CtxrUsage } from "../src/quality/qualityClient.ts";

export interface StreamedUsage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
  ctxr?: CtxrUsage;
}

export interface StreamedToken {
  token: string;
  /** The token's bytes (chat logprobs carry them; completions logprobs do not). */
  bytes: number[] | null;
  logprob: number;
  /** The top alternatives, token text -> logprob. */
  top: Record<string, number>;
}

export interface StreamedAnswer {
  text: string;
  tokens: StreamedToken[];
  finishReason: string | null;
  usage: StreamedUsage;
  /** From sending the request to the first token's chunk (client side, ms). */
  ttftMs: number;
  totalMs: number;
}

export type StreamedRoute = "chat" | "completions";

/** POSTs `body` with stream, usage and logprobs added; throws on a non-200 answer or an error event. */
export async function streamAnswer(url: string, route: StreamedRoute, body: Record<string, unknown>, topLogprobs = 5): Promise<StreamedAnswer> {
  const logprobs = route === "chat" ? { logprobs: true, top_logprobs: topLogprobs } : { logprobs: topLogprobs };
  const request = { ...body, ...logprobs, stream: true, stream_options: { include_usage: true } };
  const started = performance.now();
  const response = await fetch(`${url}/v1/${route === "chat" ? "chat/completions" : "completions"}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(request),
  });
  if (response.status !== 200) throw new Error(`${route} answered ${response.status}: ${(await response.text()).slice(0, 500)}`);
  const answer: StreamedAnswer = { text: "", tokens: [], finishReason: null, usage: { prompt_tokens: 0, completion_tokens: 0 }, ttftMs: Number.NaN, totalMs: 0 };
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const bytes of response.body!) {
    buffered += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        readChunk(JSON.parse(line.slice(6)), route, answer, started);
      }
    }
  }
  answer.totalMs = performance.now() - started;
  return answer;
}

function readChunk(chunk: any, route: StreamedRoute, answer: StreamedAnswer, started: number): void {
  if (chunk.error !== undefined) throw new Error(`stream error: ${JSON.stringify(chunk.error)}`);
  if (chunk.usage) answer.usage = chunk.usage;
  const choice = chunk.choices?.[0];
  if (choice === undefined) return;
  const tokens = route === "chat" ? chatTokens(choice.logprobs) : completionTokens(choice.logprobs);
  if ((tokens.length > 0 || choice.finish_reason) && Number.isNaN(answer.ttftMs)) answer.ttftMs = performance.now() - started;
  answer.tokens.push(...tokens);
  answer.text += route === "chat" ? (choice.delta?.content ?? "") : (choice.text ?? "");
  if (choice.finish_reason) answer.finishReason = choice.finish_reason;
}

function chatTokens(logprobs: any): StreamedToken[] {
  return (logprobs?.content ?? []).map((t: any) => ({
    token: t.token,
    bytes: t.bytes ?? null,
    logprob: t.logprob,
    top: Object.fromEntries((t.top_logprobs ?? []).map((alt: any) => [alt.token, alt.logprob])),
  }));
}

function completionTokens(logprobs: any): StreamedToken[] {
  if (!logprobs) return [];
  return (logprobs.tokens as string[]).map((token, i) => ({ token, bytes: null, logprob: logprobs.token_logprobs[i], top: logprobs.top_logprobs?.[i] ?? {} }));
}

/**
 * How far two answers to the same prompt differ: whether their tokens are the same, and the
 * largest logprob difference over the chosen tokens and the alternatives both list, up to the
 * first differing token.
 */
export function answerDifference(a: StreamedAnswer, b: StreamedAnswer): { sameTokens: boolean; maxAbsLogprobDiff: number } {
  let max = 0;
  const n = Math.min(a.tokens.length, b.tokens.length);
  for (let i = 0; i < n; i++) {
    const x = a.tokens[i]!;
    const y = b.tokens[i]!;
    if (x.token !== y.token) return { sameTokens: false, maxAbsLogprobDiff: max };
    max = Math.max(max, Math.abs(x.logprob - y.logprob));
    for (const [token, logprob] of Object.entries(x.top)) if (token in y.top) max = Math.max(max, Math.abs(logprob - y.top[token]!));
  }
  return { sameTokens: a.tokens.length === b.tokens.length, maxAbsLogprobDiff: max };
}
