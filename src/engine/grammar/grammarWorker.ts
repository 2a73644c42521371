/**
 * The grammar thread's entry (a Bun Worker started by grammarThread.ts): xgrammar's WebAssembly
 * instance, the compiled grammars (most recently used kept) and every sequence's matcher live
 * here, so a long compile or mask never holds up the request thread. Requests are handled one at a
 * time, in order, each answered once.
 */
import type { CompiledGrammar, GrammarCompiler as XGrammarCompiler, GrammarMatcher } from "@mlc-ai/web-xgrammar";
import { compileTarget } from "./grammarBuild.ts";
import type { GrammarThreadIn, GrammarThreadOut, GrammarVocabulary } from "./grammarThreadMessages.ts";

declare const self: Worker;

type XGrammar = typeof import("@mlc-ai/web-xgrammar");

/** Compiled grammars kept for reuse. */
const CACHED_GRAMMARS = 64;

interface CacheEntry {
  grammar: CompiledGrammar;
  users: number;
}

let library: { xg: XGrammar; compiler: XGrammarCompiler; stopTokenIds: number[] } | null = null;
const cache = new Map<string, CacheEntry>();
const matchers = new Map<number, { matcher: GrammarMatcher; key: string }>();

async function init(vocabulary: GrammarVocabulary): Promise<void> {
  const xg = await import("@mlc-ai/web-xgrammar");
  const info = await xg.TokenizerInfo.createTokenizerInfo(vocabulary.encodedVocab, vocabulary.vocabType, vocabulary.prependsSpace, vocabulary.vocabSize, vocabulary.stopTokenIds);
  library = { xg, compiler: await xg.GrammarCompiler.createGrammarCompiler(info), stopTokenIds: vocabulary.stopTokenIds };
}

function evict(): void {
  for (const [key, entry] of cache) {
    if (cache.size <= CACHED_GRAMMARS) return;
    if (entry.users > 0) continue;
    cache.delete(key);
    entry.grammar.dispose();
  }
}

function matcherOf(id: number): GrammarMatcher {
  const entry = matchers.get(id);
  if (entry === undefined) throw new Error(`no matcher ${id} in the grammar thread`);
  return entry.matcher;
}

function acceptAll(matcher: GrammarMatcher, ids: readonly number[]): void {
  for (const id of ids) if (!matcher.acceptToken(id)) throw new Error(`the grammar rejected token ${id}, which its mask allowed`);
}

async function handle(request: GrammarThreadIn): Promise<GrammarThreadOut> {
  if (request.kind === "init") {
    await init(request.vocabulary);
    return { kind: "ready" };
  }
  const { xg, compiler, stopTokenIds } = library!;
  switch (request.kind) {
    case "open": {
      const started = performance.now();
      let entry = cache.get(request.key);
      const compiled = entry === undefined;
      if (entry === undefined) {
        entry = { grammar: await compileTarget(xg, compiler, request.target), users: 0 };
        cache.set(request.key, entry);
      } else {
        cache.delete(request.key);
        cache.set(request.key, entry);
      }
      entry.users++;
      try {
        const matcher = await xg.GrammarMatcher.createGrammarMatcher(entry.grammar, stopTokenIds);
        matchers.set(request.matcher, { matcher, key: request.key });
        acceptAll(matcher, request.replay);
      } catch (error) {
        entry.users--;
        throw error;
      } finally {
        evict();
      }
      return { kind: "opened", compileMs: performance.now() - started, compiled };
    }
    case "mask": {
      const matcher = matcherOf(request.matcher);
      acceptAll(matcher, request.accept);
      return { kind: "mask", mask: await matcher.getNextTokenBitmask() };
    }
    case "jump": {
      const matcher = matcherOf(request.matcher);
      acceptAll(matcher, request.accept);
      return { kind: "jump", text: matcher.isTerminated() ? "" : matcher.findJumpForwardString() };
    }
    case "forced": {
      const matcher = matcherOf(request.matcher);
      let taken = 0;
      while (taken < request.tokens.length && matcher.acceptToken(request.tokens[taken]!)) taken++;
      return { kind: "forced", taken };
    }
    case "close": {
      const entry = matchers.get(request.matcher);
      if (entry !== undefined) {
        matchers.delete(request.matcher);
        entry.matcher.dispose();
        const compiled = cache.get(entry.key);
        if (compiled !== undefined) compiled.users--;
        evict();
      }
      return { kind: "closed" };
    }
  }
}

/** Whether an error came from an abort inside the WebAssembly instance (after which its memory cannot be trusted). */
function isAbort(error: unknown): boolean {
  if (error instanceof WebAssembly.RuntimeError || error instanceof RangeError) return true;
  const message = String((error as Error)?.message ?? error);
  return /Aborted|memory access|call stack|unreachable/i.test(message);
}

function send(message: GrammarThreadOut): void {
  self.postMessage(message, message.kind === "mask" ? [message.mask.buffer as ArrayBuffer] : []);
}

let queue: Promise<void> = Promise.resolve();

self.onmessage = (event: MessageEvent<GrammarThreadIn>) => {
  const request = event.data;
  queue = queue.then(async () => {
    try {
      send(await handle(request));
    } catch (error) {
      send({ kind: "error", message: String((error as Error)?.message ?? error), poisoned: isAbort(error) });
    }
  });
};
