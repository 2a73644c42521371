/**
 * Structured outputs for one model: xgrammar (its WebAssembly build, @mlc-ai/web-xgrammar)
 * compiles a request's constraint (grammarSpec.ts) against the model's vocabulary, whatever its
 * type (byte-level BPE, SentencePiece with byte fallback, raw), and hands out one matcher per
 * sequence. The library is loaded on the first constrained request; compiled grammars are cached
 * (most recently used kept) and freed once evicted and no sequence uses them.
 */
import type { CompiledGrammar, GrammarCompiler as XGrammarCompiler } from "@mlc-ai/web-xgrammar";
import type { ModelTokenizer } from "../model/modelTokenizer.ts";
import { GrammarConstraint } from "./grammarConstraint.ts";
import { GrammarSpecError, type GrammarSpec, type RequestedGrammar } from "./grammarSpec.ts";
import { rewriteJsonSchema } from "./jsonSchemaRewrite.ts";
import { literal, regularGrammar } from "./regularGrammar.ts";
import { Utf8TokenTable } from "./utf8Tokens.ts";
import { toolCallStructuralTag, type ToolArguments, type ToolChoice } from "./toolCalls/toolCallGrammar.ts";
import type { ToolCallFormat } from "./toolCalls/toolCallFormat.ts";

/** The tools and choice a tool-call constraint is built from. */
export interface ToolCallGrammarRequest {
  format: ToolCallFormat;
  tools: readonly { name: string; parameters?: Record<string, unknown> | boolean }[];
  choice: ToolChoice;
  parallel: boolean;
}

/**
 * Whitespace characters allowed between JSON elements: any kind, as vLLM's default, but a bounded
 * run (pretty-printing 6 levels deep at indent 2 needs 13), since a weak model otherwise spends
 * its whole budget on whitespace and never closes the object.
 */
const MAX_JSON_WHITESPACE = 16;

/** Compiled grammars kept for reuse. */
const CACHED_GRAMMARS = 64;

type XGrammar = typeof import("@mlc-ai/web-xgrammar");

interface CacheEntry {
  compiled: Promise<CompiledGrammar>;
  users: number;
  evicted: boolean;
}

/** The EBNF of a choice among literal strings (deterministic: xgrammar's flat alternations go wrong, regularGrammar.ts). */
function choiceGrammar(choices: readonly string[]): string {
  return `root ::= ${regularGrammar(choices.map(literal))}`;
}

/**
 * A character of a JSON string: no control characters, quote or backslash (JSON forbids them raw).
 * A negated class: xgrammar 0.1.27 mis-compiles classes with ranges past U+07FF (they admit every
 * token, control characters and specials included). Well-formed UTF-8 is enforced outside the
 * grammar (grammarConstraint.ts).
 */
const JSON_STRING_CHARACTER = String.raw`[^\0-\x1f"\\]`;

/**
 * xgrammar's JSON grammars (0.1.27) let through what makes the text fail to parse, break the
 * schema, or never end: string characters may be raw control characters or malformed UTF-8, and
 * whitespace inside arrays and objects is unbounded whatever the limit asked. Both are rewritten
 * in the EBNF.
 */
export function hardenJsonGrammar(ebnf: string): string {
  return ebnf
    .replaceAll('[^"\\\\\\r\\n]', JSON_STRING_CHARACTER)
    .replaceAll('[^\\0-\\x1f\\"\\\\\\r\\n]', JSON_STRING_CHARACTER)
    .replaceAll("[ \\n\\t]*", `[ \\n\\t]{0,${MAX_JSON_WHITESPACE}}`);
}

export class GrammarCompiler {
  private library: Promise<{ xg: XGrammar; compiler: XGrammarCompiler }> | null = null;
  private readonly cache = new Map<string, CacheEntry>();
  /** Seconds spent compiling grammars, and how many (cache misses). */
  compileSeconds = 0;
  compiled = 0;

  constructor(
    private readonly tokenizer: ModelTokenizer,
    /** The model's logits width (may exceed the tokenizer's vocabulary). */
    private readonly vocabSize: number,
    private readonly stopTokenIds: readonly number[],
  ) {}

  /** A new constraint for one sequence; GrammarSpecError (naming the request's field) when the grammar does not compile. */
  async constraint(requested: RequestedGrammar): Promise<GrammarConstraint> {
    const { xg } = await this.load();
    const key = JSON.stringify(requested.spec);
    const entry = this.entry(key, requested);
    entry.users++;
    try {
      const compiled = await entry.compiled;
      const matcher = await xg.GrammarMatcher.createGrammarMatcher(compiled, [...this.stopTokenIds]);
      return new GrammarConstraint(matcher, this.utf8Table(), (text) => this.tokenizer.encode(text), () => this.release(key, entry));
    } catch (error) {
      this.release(key, entry);
      throw error;
    }
  }

  private entry(key: string, requested: RequestedGrammar): CacheEntry {
    let entry = this.cache.get(key);
    if (entry !== undefined) {
      this.cache.delete(key);
      this.cache.set(key, entry);
      return entry;
    }
    entry = { compiled: this.compile(requested), users: 0, evicted: false };
    const failed = entry;
    entry.compiled.catch(() => {
      if (this.cache.get(key) === failed) this.cache.delete(key);
    });
    this.cache.set(key, entry);
    while (this.cache.size > CACHED_GRAMMARS) {
      const [oldKey, old] = this.cache.entries().next().value!;
      this.cache.delete(oldKey);
      old.evicted = true;
      if (old.users === 0) void old.compiled.then((grammar) => grammar.dispose(), () => {});
    }
    return entry;
  }

  private release(key: string, entry: CacheEntry): void {
    entry.users--;
    if (entry.evicted && entry.users === 0 && this.cache.get(key) !== entry) void entry.compiled.then((grammar) => grammar.dispose(), () => {});
  }

  private async compile({ spec, field }: RequestedGrammar): Promise<CompiledGrammar> {
    const { compiler } = await this.load();
    const started = performance.now();
    try {
      return await this.compileSpec(compiler, spec);
    } catch (error) {
      throw new GrammarSpecError(`cannot be compiled to a grammar: ${(error as Error).message ?? String(error)}`, field);
    } finally {
      this.compileSeconds += (performance.now() - started) / 1000;
      this.compiled++;
    }
  }

  private compileSpec(compiler: XGrammarCompiler, spec: GrammarSpec): Promise<CompiledGrammar> {
    switch (spec.kind) {
      case "json":
        // OpenAI's json_object: a JSON object, any keys.
        return this.compileJson(compiler, { type: "object" }, false);
      case "json_schema":
        // Strict: no properties the schema does not name.
        return this.compileJson(compiler, spec.schema, true);
      case "regex":
        return compiler.compileStructuralTag({ type: "structural_tag", format: { type: "regex", pattern: spec.pattern } });
      case "choice":
        return compiler.compileGrammar(choiceGrammar(spec.choices));
      case "ebnf":
        return compiler.compileGrammar(spec.grammar);
      case "structural_tag":
        return compiler.compileStructuralTag(spec.tag);
    }
  }

  /** A JSON schema through xgrammar's own schema-to-EBNF conversion, hardened (hardenJsonGrammar), then compiled. */
  private async compileJson(compiler: XGrammarCompiler, schema: Record<string, unknown> | boolean, strict: boolean): Promise<CompiledGrammar> {
    return compiler.compileGrammar(await this.jsonGrammar(schema, strict));
  }

  /** The hardened EBNF of a JSON schema (what xgrammar's conversion gets wrong is rewritten around it: jsonSchemaRewrite.ts). */
  private async jsonGrammar(schema: Record<string, unknown> | boolean, strict: boolean): Promise<string> {
    const { xg } = await this.load();
    const rewritten = rewriteJsonSchema(schema);
    const ebnf = await xg.Testings._jsonSchemaToEBNF(JSON.stringify(rewritten.schema), true, undefined, undefined, strict, MAX_JSON_WHITESPACE);
    return rewritten.restore(hardenJsonGrammar(ebnf));
  }

  /**
   * A constraint that makes tool calls well-formed (toolCallGrammar.ts): arguments follow each
   * function's parameter schema (strictly: no properties it does not name). Errors name `field`.
   */
  async toolCallConstraint(request: ToolCallGrammarRequest, field: string): Promise<GrammarConstraint> {
    let tools: ToolArguments[];
    try {
      tools = await Promise.all(request.tools.map(async (tool) => ({ name: tool.name, grammar: await this.jsonGrammar(tool.parameters ?? { type: "object" }, true) })));
    } catch (error) {
      throw new GrammarSpecError(`a function's parameters cannot be compiled to a grammar: ${(error as Error).message ?? String(error)}`, "tools");
    }
    return this.constraint({ spec: { kind: "structural_tag", tag: toolCallStructuralTag(request.format, tools, request.choice, request.parallel) }, field });
  }

  private utf8: Utf8TokenTable | null = null;

  /** Every token's bytes (specials: none), built once. */
  private utf8Table(): Utf8TokenTable {
    this.utf8 ??= new Utf8TokenTable(
      Array.from({ length: this.vocabSize }, (_, id) => (id >= this.tokenizer.vocabSize || this.tokenizer.isSpecialToken(id) ? new Uint8Array(0) : Uint8Array.from(this.tokenizer.tokenBytes(id)))),
    );
    return this.utf8;
  }

  private load(): Promise<{ xg: XGrammar; compiler: XGrammarCompiler }> {
    this.library ??= (async () => {
      const xg = await import("@mlc-ai/web-xgrammar");
      // Special tokens as "" (xgrammar then never allows them; stop tokens still end the text, by id):
      // given their names, it reads <s> as three characters of text that the output then leaves out.
      const vocab = this.tokenizer.encodedVocab().map((token, id) => (this.tokenizer.isSpecialToken(id) ? "" : token));
      const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, this.tokenizer.vocabType, this.tokenizer.prependsSpace, this.vocabSize, [...this.stopTokenIds]);
      return { xg, compiler: await xg.GrammarCompiler.createGrammarCompiler(info) };
    })();
    return this.library;
  }
}
