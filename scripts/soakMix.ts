/**
 * The traffic of scripts/bench-soak.ts: the kinds of request a soak client sends, their weights,
 * a seeded weighted draw, and each kind's request (path, body, whether it streams, when the client
 * hangs up, what status it expects). Pure: the random numbers come from the caller.
 */

export const TRAFFIC_KINDS = [
  /** Streamed chat with `documents` drawn from a shared pool (requests share prefixes). */
  "stream_documents",
  /** Non-streamed chat, half of them with documents. */
  "chat",
  /** Plain /v1/completions, streamed or not. */
  "completion",
  /** n = 2..4 choices, streamed or not. */
  "n_choices",
  /** A streamed documents chat the client hangs up on after its first chunk. */
  "hangup_first_chunk",
  /** A streamed documents chat the client hangs up on after a random delay. */
  "hangup_delay",
  /** A prompt longer than the model's context: 400. */
  "overlong",
  /** Bad JSON or wrong types: 400. */
  "malformed",
] as const;

export type TrafficKind = (typeof TRAFFIC_KINDS)[number];

export const DEFAULT_WEIGHTS: Readonly<Record<TrafficKind, number>> = {
  stream_documents: 40,
  chat: 14,
  completion: 14,
  n_choices: 8,
  hangup_first_chunk: 6,
  hangup_delay: 6,
  overlong: 6,
  malformed: 6,
};

/** A key drawn with probability weight / total; `random` gives uniform numbers in [0, 1). */
export function pickWeighted<K extends string>(weights: Readonly<Record<K, number>>, random: () => number): K {
  const entries = (Object.entries(weights) as [K, number][]).filter(([, weight]) => weight > 0);
  const total = entries.reduce((sum, [, weight]) => sum + weight, 0);
  if (entries.length === 0 || !(total > 0)) throw new Error("pickWeighted: no positive weight");
  let at = random() * total;
  for (const [key, weight] of entries) {
    if (at < weight) return key;
    at -= weight;
  }
  return entries[entries.length - 1]![0];
}

/** Parses "kind=weight,kind=weight" over the defaults (unnamed kinds keep theirs; 0 turns one off). */
export function parseWeights(text: string | undefined): Record<TrafficKind, number> {
  const weights = { ...DEFAULT_WEIGHTS };
  if (text === undefined || text.trim() === "") return weights;
  for (const part of text.split(",")) {
    const [name, value] = part.split("=");
    if (!(TRAFFIC_KINDS as readonly string[]).includes(name!.trim())) throw new Error(`--mix: unknown kind '${name}' (${TRAFFIC_KINDS.join(", ")})`);
    const weight = Number(value);
    if (!Number.isFinite(weight) || weight < 0) throw new Error(`--mix: weight of ${name} must be a number >= 0, got '${value}'`);
    weights[name!.trim() as TrafficKind] = weight;
  }
  return weights;
}

export interface SoakDocument {
  id: string;
  text: string;
}

/** `count` documents of about `chars` characters of plain words, each distinct from its first line. */
export function documentPool(count: number, chars: number): SoakDocument[] {
  const words = ["harbour", "signal", "ledger", "granite", "orchard", "copper", "lantern", "meadow", "quarry", "beacon", "timber", "canal"];
  return Array.from({ length: count }, (_, id) => {
    let text = `Document ${id}: notes on the ${words[id % words.length]} survey.`;
    for (let k = 0; text.length < chars; k++) text += ` ${words[(id * 7 + k * 5) % words.length]}`;
    return { id: `doc-${id}`, text: text.slice(0, Math.max(chars, 1)) };
  });
}

export interface MixShape {
  /** The model id requests name. */
  model: string;
  documents: readonly SoakDocument[];
  /** Documents a request takes (at least 1, at most the pool). */
  documentsPerRequest: number;
  /** Generated tokens a request asks for at most (drawn from max/4..max). */
  maxTokens: number;
  /** Characters of an over-long prompt (more tokens than the model takes). */
  overlongChars: number;
}

export type HangUp = { after: "first_chunk" } | { after: "delay"; ms: number };

export interface SoakRequest {
  kind: TrafficKind;
  path: "/v1/chat/completions" | "/v1/completions";
  body: string;
  stream: boolean;
  hangUp: HangUp | null;
  /** The status a correct server answers. */
  expectStatus: 200 | 400;
}

/**
 * Distinct documents, the popular ones more often (weight 1/(rank+1)), in pool order, so that
 * requests share leading documents.
 */
export function drawDocuments(pool: readonly SoakDocument[], count: number, random: () => number): SoakDocument[] {
  const want = Math.max(1, Math.min(count, pool.length));
  const weights: Record<string, number> = {};
  pool.forEach((_, i) => (weights[String(i)] = 1 / (i + 1)));
  const chosen = new Set<number>();
  while (chosen.size < want) {
    const i = Number(pickWeighted(weights, random));
    chosen.add(i);
    delete weights[String(i)];
  }
  return [...chosen].sort((a, b) => a - b).map((i) => pool[i]!);
}

const int = (random: () => number, lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));

/** The request of one draw of `kind`. */
export function soakRequest(kind: TrafficKind, shape: MixShape, random: () => number): SoakRequest {
  const maxTokens = int(random, Math.max(1, Math.floor(shape.maxTokens / 4)), Math.max(1, shape.maxTokens));
  const seed = int(random, 0, 1_000_000);
  const common = { model: shape.model, max_tokens: maxTokens, temperature: 0.8, seed, ignore_eos: true };
  const question = { role: "user", content: `Question ${seed}: what do these notes say about the survey?` };
  const documents = () => drawDocuments(shape.documents, int(random, 1, shape.documentsPerRequest), random);
  const streamed = (extra: Record<string, unknown>) => ({ ...common, stream: true, stream_options: { include_usage: true }, ...extra });
  const chat = "/v1/chat/completions" as const;
  switch (kind) {
    case "stream_documents":
      return { kind, path: chat, body: JSON.stringify(streamed({ messages: [question], documents: documents() })), stream: true, hangUp: null, expectStatus: 200 };
    case "chat": {
      const withDocuments = random() < 0.5 ? { documents: documents() } : {};
      return { kind, path: chat, body: JSON.stringify({ ...common, messages: [question], ...withDocuments }), stream: false, hangUp: null, expectStatus: 200 };
    }
    case "completion": {
      const stream = random() < 0.5;
      const body = { ...(stream ? streamed({}) : common), prompt: `Survey log ${seed}: the ${shape.documents[seed % shape.documents.length]!.text.slice(0, 200)}` };
      return { kind, path: "/v1/completions", body: JSON.stringify(body), stream, hangUp: null, expectStatus: 200 };
    }
    case "n_choices": {
      const stream = random() < 0.5;
      const body = { ...(stream ? streamed({}) : common), n: int(random, 2, 4), messages: [question], documents: documents() };
      return { kind, path: chat, body: JSON.stringify(body), stream, hangUp: null, expectStatus: 200 };
    }
    case "hangup_first_chunk":
    case "hangup_delay": {
      const hangUp: HangUp = kind === "hangup_first_chunk" ? { after: "first_chunk" } : { after: "delay", ms: int(random, 100, 3000) };
      return { kind, path: chat, body: JSON.stringify(streamed({ messages: [question], documents: documents() })), stream: true, hangUp, expectStatus: 200 };
    }
    case "overlong": {
      const content = "overlong ".repeat(Math.ceil(shape.overlongChars / 9)).slice(0, shape.overlongChars);
      return { kind, path: chat, body: JSON.stringify({ ...common, messages: [{ role: "user", content }] }), stream: false, hangUp: null, expectStatus: 400 };
    }
    case "malformed": {
      const bodies = [
        `{"model": "${shape.model}", "messages": [{"role": "user", "content": "unterminated`,
        JSON.stringify({ ...common, messages: "not a list" }),
        JSON.stringify({ ...common, messages: [question], max_tokens: "ten" }),
        JSON.stringify({ ...common, messages: [{ role: "user", content: 42 }] }),
        JSON.stringify({ ...common, messages: [question], temperature: "hot", stream: "yes" }),
      ];
      return { kind, path: chat, body: bodies[int(random, 0, bodies.length - 1)]!, stream: false, hangUp: null, expectStatus: 400 };
    }
  }
}
