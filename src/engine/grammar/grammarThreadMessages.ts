/**
 * The messages between the request thread (grammarThread.ts) and the grammar thread
 * (grammarWorker.ts). Every request gets exactly one reply, in order, so the request thread knows
 * which request the thread is working on (the head of its queue) and how long it has taken.
 */
import type { GrammarSpec } from "../grammarSpec.ts";
import type { ToolCallFormat } from "../toolCalls/toolCallFormat.ts";
import type { ToolChoice } from "../toolCalls/toolCallGrammar.ts";

/** The tools and choice a tool-call constraint is built from. */
export interface ToolCallGrammarRequest {
  format: ToolCallFormat;
  tools: readonly { name: string; parameters?: Record<string, unknown> | boolean }[];
  choice: ToolChoice;
  parallel: boolean;
}

/** What a matcher's grammar is compiled from. */
export type BuildTarget = { kind: "spec"; spec: GrammarSpec } | { kind: "tools"; request: ToolCallGrammarRequest };

/** The model's vocabulary as xgrammar needs it (specials as ""), sent once when the thread starts. */
export interface GrammarVocabulary {
  encodedVocab: string[];
  vocabType: string;
  prependsSpace: boolean;
  vocabSize: number;
  stopTokenIds: number[];
}

export type GrammarThreadIn =
  | { kind: "init"; vocabulary: GrammarVocabulary }
  /** Compiles (or reuses) the target's grammar and opens a matcher on it, then accepts `replay`. */
  | { kind: "open"; matcher: number; key: string; target: BuildTarget; replay: number[] }
  /** Accepts `accept` (each must be allowed), then answers the next token's mask. */
  | { kind: "mask"; matcher: number; accept: number[] }
  /** Accepts `accept`, then answers the string the grammar forces next ("" when it leaves a choice). */
  | { kind: "jump"; matcher: number; accept: number[] }
  /** Accepts `tokens` until the first the grammar rejects; answers how many it took. */
  | { kind: "forced"; matcher: number; tokens: number[] }
  | { kind: "close"; matcher: number };

export type GrammarThreadOut =
  | { kind: "ready" }
  | { kind: "opened"; compileMs: number; compiled: boolean }
  | { kind: "mask"; mask: Int32Array }
  | { kind: "jump"; text: string }
  | { kind: "forced"; taken: number }
  | { kind: "closed" }
  /**
   * The request failed. `poisoned`: xgrammar aborted (it reports every compile error by aborting
   * its WebAssembly instance, whose memory may then be corrupt): the thread must be replaced.
   */
  | { kind: "error"; message: string; poisoned: boolean };
