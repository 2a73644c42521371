/**
 * The workloads of scripts/bench-routing.ts as chat requests, and their replay through the proxy.
 *
 * - Multi-turn (multiturn_*.jsonl): a turn's user message holds its retrieved documents
 *   (XML-tagged, benchPrefixChat's userTurnText) and a question; every turn sends the whole
 *   history, the engine's fixed answer as the assistant's messages. Turns of a conversation go in
 *   order (a turn is sent once the one before it is answered), rounds (every conversation's turn n)
 *   one after another, conversations within a round shuffled (see multiTurnRequests).
 * - Zipf RAG (zipf_*.jsonl): the documents in the `documents` field and a distinct question.
 *
 * Requests stream (TTFB = sending → the first body chunk) with usage, at most `concurrency` at once.
 */
import { readFileSync } from "node:fs";
import type { ModelTokenizer } from "../src/model/modelTokenizer.ts";
import { mirrorBlockKeys } from "../src/proxy/engineCacheMirror.ts";
import { renderDocumentsField } from "../src/chat/documentsField.ts";
import { FAKE_ANSWER } from "../test/helpers/fakeEngine/fakeEngine.ts";
import { userTurnText, type WorkloadTurn } from "./benchPrefixChat.ts";
import { documentText } from "./benchProxyUpstream.ts";
import { seeded } from "./benchTtfb.ts";

export interface BenchRequest {
  /** Requests of one conversation go in order (null: independent). */
  conversation: number | null;
  body: Record<string, unknown>;
  /** The messages as the engine would get them without ctxr (documents rendered in the text). */
  plainMessages: { role: string; content: string }[];
}

const readLines = (file: string) =>
  readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "");

/**
 * `shuffleRounds`: the file sends every conversation's turn 1, then every turn 2, … in the same
 * conversation order each time, so round-robin over a number of engines that divides the number of
 * conversations gives each conversation the same engine every turn; a seeded shuffle of each
 * round (turns still in order) takes that accident away.
 */
export function multiTurnRequests(file: string, conversations: number, docChars: number, shuffleRounds = true): BenchRequest[] {
  const random = seeded(13);
  const turns = readLines(file)
    .map((line) => JSON.parse(line) as WorkloadTurn)
    .filter((t) => t.conv < conversations)
    .map((t) => ({ t, order: shuffleRounds ? random() : 0 }))
    .sort((a, b) => a.t.turn - b.t.turn || a.order - b.order)
    .map(({ t }) => t);
  const histories = new Map<number, { role: string; content: string }[]>();
  return turns.map((turn) => {
    const history = histories.get(turn.conv) ?? [];
    const messages = [...history, { role: "user", content: userTurnText(turn, turn.blocks.length, docChars) }];
    histories.set(turn.conv, [...messages, { role: "assistant", content: FAKE_ANSWER }]);
    return { conversation: turn.conv, body: { model: "fake-model", max_tokens: 8, messages }, plainMessages: messages };
  });
}

export function ragRequests(file: string, count: number, docChars: number): BenchRequest[] {
  return readLines(file)
    .slice(0, count)
    .map((line, i) => {
      const documents = (JSON.parse(line) as (number | string)[]).map((id) => ({ id: String(id), text: documentText(id, docChars) }));
      const question = `Question ${i}: which documents mention a ${["river", "market", "treaty", "planet", "garden"][i % 5]}?`;
      return {
        conversation: null,
        body: { model: "fake-model", max_tokens: 8, messages: [{ role: "user", content: question }], documents },
        plainMessages: [{ role: "user", content: `${renderDocumentsField(documents)}\n\n${question}` }],
      };
    });
}

/**
 * The workload's distinct prompt tokens: full blocks of the prompts as the client sends them
 * (without ctxr's rewriting), named by chained hashes, so a block counts once per distinct prefix
 * — what an unbounded prefix cache would end up holding.
 */
export function distinctPromptTokens(requests: readonly BenchRequest[], tokenizer: ModelTokenizer, blockSize: number): { prompt: number; distinct: number } {
  const seen = new Set<bigint>();
  let prompt = 0;
  for (const request of requests) {
    const ids = tokenizer.encode(tokenizer.applyChatTemplate(request.plainMessages));
    prompt += ids.length;
    for (const key of mirrorBlockKeys(ids, blockSize)) seen.add(key);
  }
  return { prompt, distinct: seen.size * blockSize };
}

export interface Reply {
  ttfbMs: number;
  /** Sending → the last byte of the answer. */
  e2eMs: number;
  promptTokens: number;
  cachedTokens: number;
}

/** One streamed chat request; the usage chunk's figures. */
export async function streamChat(url: string, body: Record<string, unknown>): Promise<Reply> {
  const started = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (response.status !== 200) throw new Error(`chat answered ${response.status}: ${(await response.text()).slice(0, 300)}`);
  let ttfbMs = Number.NaN;
  let text = "";
  const decoder = new TextDecoder();
  for await (const chunk of response.body!) {
    if (Number.isNaN(ttfbMs)) ttfbMs = performance.now() - started;
    text += decoder.decode(chunk, { stream: true });
  }
  const e2eMs = performance.now() - started;
  const usage = text
    .split("\n")
    .filter((line) => line.startsWith("data: {"))
    .map((line) => JSON.parse(line.slice(6)) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } } | null })
    .findLast((event) => event.usage)?.usage;
  if (usage === undefined || usage === null) throw new Error("the answer carried no usage");
  return { ttfbMs, e2eMs, promptTokens: usage.prompt_tokens, cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

/** Sends every request in order, at most `concurrency` at once, a conversation's turns one after another. */
export async function replay(url: string, requests: readonly BenchRequest[], concurrency: number, onReply?: (done: number) => void): Promise<Reply[]> {
  const replies: Reply[] = new Array(requests.length);
  const lastOfConversation = new Map<number, Promise<void>>();
  const inFlight = new Set<Promise<void>>();
  let done = 0;
  for (const [i, request] of requests.entries()) {
    while (inFlight.size >= concurrency) await Promise.race(inFlight);
    const before = request.conversation === null ? undefined : lastOfConversation.get(request.conversation);
    const sent = (async () => {
      await before;
      replies[i] = await streamChat(url, request.body);
      onReply?.(++done);
    })();
    const tracked: Promise<void> = sent.finally(() => inFlight.delete(tracked));
    inFlight.add(tracked);
    if (request.conversation !== null) lastOfConversation.set(request.conversation, sent);
  }
  await Promise.all(inFlight);
  return replies;
}
