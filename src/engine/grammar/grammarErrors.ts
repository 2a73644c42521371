/**
 * Errors of constrained generation after the request was accepted. Each ends one request with a
 * 400-class answer (an error event in a stream); none touches another request.
 */

/** Codes of the errors below, as OpenAI-shaped error bodies carry them. */
export type GrammarRuntimeCode = "grammar_step_limit" | "grammar_dead_end" | "grammar_failed";

export class GrammarRuntimeError extends Error {
  constructor(
    message: string,
    readonly code: GrammarRuntimeCode,
  ) {
    super(message);
    this.name = "GrammarRuntimeError";
  }
}

/** The grammar thread was replaced while a request was under way (not that request's fault): retry on the new one. */
export class GrammarThreadRestartedError extends Error {
  constructor(why: string) {
    super(`the grammar thread was restarted (${why})`);
    this.name = "GrammarThreadRestartedError";
  }
}

/** A request to the grammar thread took longer than its limit; the thread was replaced. */
export class GrammarTimeLimitError extends Error {
  constructor(
    readonly limitMs: number,
    readonly work: "compile" | "step",
  ) {
    super(`the grammar's ${work} took longer than ${limitMs} ms`);
    this.name = "GrammarTimeLimitError";
  }
}

/** xgrammar failed on a request (a compile error, or an abort of its WebAssembly instance). */
export class GrammarThreadError extends Error {
  constructor(
    message: string,
    readonly poisoned: boolean,
  ) {
    super(message);
    this.name = "GrammarThreadError";
  }
}
