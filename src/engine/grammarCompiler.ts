/**
 * Structured outputs for one model: xgrammar (its WebAssembly build, @mlc-ai/web-xgrammar)
 * compiles a request's constraint (grammarSpec.ts) against the model's vocabulary, whatever its
 * type (byte-level BPE, SentencePiece with byte fallback, raw), and hands out one matcher per
 * sequence. Compiles and matchers live on the grammar thread (grammar/grammarThread.ts), started
 * on the first constrained request, so neither holds up the request thread; a request is checked
 * against the grammar budget (grammar/grammarBudget.ts) before anything is compiled, and a compile
 * has a time limit.
 */
import type { ModelTokenizer } from "../model/modelTokenizer.ts";
import { checkGrammarBudget, checkToolBudget, DEFAULT_GRAMMAR_LIMITS, type GrammarLimits } from "./grammar/grammarBudget.ts";
import { GrammarThreadError, GrammarThreadRestartedError, GrammarTimeLimitError } from "./grammar/grammarErrors.ts";
import { GrammarThread } from "./grammar/grammarThread.ts";
import type { BuildTarget, ToolCallGrammarRequest } from "./grammar/grammarThreadMessages.ts";
import { GrammarConstraint, type MatcherHome } from "./grammarConstraint.ts";
import { GrammarSpecError, type RequestedGrammar } from "./grammarSpec.ts";
import { Utf8TokenTable } from "./utf8Tokens.ts";

export { hardenJsonGrammar } from "./grammar/grammarBuild.ts";
export type { ToolCallGrammarRequest } from "./grammar/grammarThreadMessages.ts";

export class GrammarCompiler {
  private readonly thread: GrammarThread;
  private nextMatcher = 1;
  private readonly stopIds: ReadonlySet<number>;
  /** Seconds spent compiling grammars, and how many (cache misses). */
  compileSeconds = 0;
  compiled = 0;

  constructor(
    private readonly tokenizer: ModelTokenizer,
    /** The model's logits width (may exceed the tokenizer's vocabulary). */
    private readonly vocabSize: number,
    private readonly stopTokenIds: readonly number[],
    readonly limits: GrammarLimits = DEFAULT_GRAMMAR_LIMITS,
    log?: (text: string) => void,
  ) {
    this.stopIds = new Set(stopTokenIds);
    this.thread = new GrammarThread(
      () => ({
        // Special tokens as "" (xgrammar then never allows them; stop tokens still end the text, by id):
        // given their names, it reads <s> as three characters of text that the output then leaves out.
        encodedVocab: this.tokenizer.encodedVocab().map((token, id) => (this.tokenizer.isSpecialToken(id) ? "" : token)),
        vocabType: this.tokenizer.vocabType,
        prependsSpace: this.tokenizer.prependsSpace,
        vocabSize: this.vocabSize,
        stopTokenIds: [...this.stopTokenIds],
      }),
      log,
    );
  }

  /** Grammar threads replaced (after an abort inside xgrammar, a time limit or a crash). */
  get threadRestarts(): number {
    return this.thread.restarts;
  }

  /** A new constraint for one sequence; GrammarSpecError (naming the request's field) when the grammar is over budget or does not compile. */
  async constraint(requested: RequestedGrammar): Promise<GrammarConstraint> {
    checkGrammarBudget(requested, this.limits);
    return this.open({ kind: "spec", spec: requested.spec }, requested.field, "cannot be compiled to a grammar");
  }

  /**
   * A constraint that makes tool calls well-formed (toolCallGrammar.ts): arguments follow each
   * function's parameter schema (strictly: no properties it does not name). Errors name `tools`.
   */
  async toolCallConstraint(request: ToolCallGrammarRequest, _field = "tools"): Promise<GrammarConstraint> {
    checkToolBudget(request.tools, this.limits);
    return this.open({ kind: "tools", request }, "tools", "a function's parameters cannot be compiled to a grammar");
  }

  close(): void {
    this.thread.close();
  }

  private async open(target: BuildTarget, field: string, failure: string): Promise<GrammarConstraint> {
    const home: MatcherHome = {
      thread: this.thread,
      id: this.nextMatcher++,
      key: JSON.stringify(target),
      target,
      generation: 0,
      compileLimitMs: this.limits.compileMs,
      stepLimitMs: this.limits.stepMs,
      stopTokenIds: this.stopIds,
    };
    for (let attempt = 0; ; attempt++) {
      try {
        const opening = this.thread.request({ kind: "open", matcher: home.id, key: home.key, target, replay: [] }, home.compileLimitMs, "compile");
        // The thread the request went to (request() starts one when none runs).
        const generation = this.thread.generation;
        const reply = await opening;
        home.generation = generation;
        if (reply.kind === "opened" && reply.compiled) {
          this.compiled++;
          this.compileSeconds += reply.compileMs / 1000;
        }
        break;
      } catch (error) {
        // Another request's failure replaced the thread under this one: try once more on the new one.
        if (error instanceof GrammarThreadRestartedError && attempt === 0) continue;
        if (error instanceof GrammarTimeLimitError) {
          throw new GrammarSpecError(`is over the grammar compile budget: compiling took longer than --max-grammar-compile-ms (${this.limits.compileMs} ms)`, field);
        }
        if (error instanceof GrammarThreadError || error instanceof GrammarThreadRestartedError) throw new GrammarSpecError(`${failure}: ${error.message}`, field);
        throw error;
      }
    }
    return new GrammarConstraint(home, this.utf8Table(), (text) => this.tokenizer.encode(text), () => {});
  }

  private utf8: Utf8TokenTable | null = null;

  /** Every token's bytes (specials: none), built once. */
  private utf8Table(): Utf8TokenTable {
    this.utf8 ??= new Utf8TokenTable(
      Array.from({ length: this.vocabSize }, (_, id) => (id >= this.tokenizer.vocabSize || this.tokenizer.isSpecialToken(id) ? new Uint8Array(0) : Uint8Array.from(this.tokenizer.tokenBytes(id)))),
    );
    return this.utf8;
  }
}
