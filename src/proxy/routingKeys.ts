/**
 * What cache-aware routing compares: a request as the sequence of chunks its
 * forwarded prompt starts with. A chat request is its earlier messages (each a
 * chunk: the rewriter keeps them byte-identical from turn to turn) followed by
 * the new turn's documents in forwarded order; a completion is its documents.
 * Besides that lookup sequence, a chat request leaves its whole message list
 * as a sequence, which is the history the conversation's next turn starts with.
 * Tokens are estimates (four characters a token); routing only compares them.
 */
import type { ContentKey } from "./contentKey.ts";
import { estimateTokens } from "../online/blocks.ts";
import { wyhash } from "../runtime/hashing.ts";

export interface RouteKey {
  readonly key: string;
  readonly tokens: number;
}

export interface RoutingPlan {
  /** The prefix to look for in each upstream's routing index (empty: route by load). */
  readonly lookup: RouteKey[];
  /** Recorded with the lookup: every message of a chat request, for the next turn. */
  readonly turn: RouteKey[] | null;
  /**
   * The forwarded prompt's full blocks as the engines' cache mirrors name them (issue 13), when
   * the proxy tokenizes prompts as the engine does (--tokenizer) and follows KV events.
   */
  readonly blockKeys?: readonly ContentKey[];
}

export const EMPTY_PLAN: RoutingPlan = { lookup: [], turn: null };

interface RewriteFigures {
  documentKeys: string[];
  forwardedTokens: number;
}

/** A forwarded chat request's plan. */
export function chatRoutingPlan(forwarded: Record<string, unknown>, result: RewriteFigures): RoutingPlan {
  const messages = Array.isArray(forwarded.messages) ? (forwarded.messages as unknown[]) : [];
  const keys = messages.map(messageRouteKey);
  const history = keys.slice(0, -1);
  const historyTokens = history.reduce((total, k) => total + k.tokens, 0);
  return { lookup: [...history, ...documentRouteKeys(result, historyTokens)], turn: keys.length > 0 ? keys : null };
}

/** A forwarded completion request's plan. */
export function completionRoutingPlan(result: RewriteFigures): RoutingPlan {
  return { lookup: documentRouteKeys(result, 0), turn: null };
}

/** The documents, sharing the forwarded tokens not in the history. */
function documentRouteKeys(result: RewriteFigures, historyTokens: number): RouteKey[] {
  const count = result.documentKeys.length;
  if (count === 0) return [];
  const tokens = Math.max(1, Math.floor((result.forwardedTokens - historyTokens) / count));
  return result.documentKeys.map((key) => ({ key: `d:${key}`, tokens }));
}

function messageRouteKey(message: unknown, position: number): RouteKey {
  const m = (message ?? {}) as { role?: unknown; content?: unknown };
  const content = typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? null);
  const role = typeof m.role === "string" ? m.role : JSON.stringify(m.role ?? null);
  const hash = wyhash(`${position}\u0000${role}\u0000${content}`);
  return { key: `m:${hash.toString(36)}:${content.length}`, tokens: estimateTokens(content) };
}
