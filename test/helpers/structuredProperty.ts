/**
 * The structured-outputs property (issue 20 item 6), for test/engine/structuredProperty.test.ts:
 * sampled answers to random JSON schemas, each checked on its own terms. One that finished by grammar completion must be
 * exactly its tokens' text (well-formed UTF-8), parse, and validate with ajv; one cut by max_tokens
 * must be a prefix of a valid answer (grammarCompletion.ts completes it with the grammar, and the
 * completion must parse and validate).
 */
import Ajv from "ajv";
import type { GenerationEngine } from "../../src/engine/generationEngine.ts";
import type { GenerationResult } from "../../src/engine/generationTypes.ts";
import type { RequestedGrammar } from "../../src/engine/grammarSpec.ts";
import { completeAnswer, completionPreferences, strictText } from "./grammarCompletion.ts";
import type { Schema } from "./randomSchemas.ts";

export interface PropertyFailure {
  schema: Schema;
  seed: number;
  finishReason: string;
  text: string;
  problem: string;
}

export interface PropertyTally {
  schemas: number;
  answers: number;
  /** Answers that finished by grammar completion (finish_reason "stop"), all validated. */
  finished: number;
  /** Answers cut by max_tokens, each completed to a valid answer. */
  cut: number;
  failures: PropertyFailure[];
}

export interface PropertyOptions {
  promptIds: readonly number[];
  /** Answers per schema, sampled with seeds 0 .. seeds-1. */
  seeds: number;
  maxTokens: number;
  temperature?: number;
  /** Schemas whose answers are generated together (their sequences share batches). */
  concurrentSchemas?: number;
}

const ajv = new Ajv({ strict: false });

const jsonSchema = (schema: Schema): RequestedGrammar => ({ spec: { kind: "json_schema", schema }, field: "response_format.json_schema.schema" });

/** Why an answer breaks the property, or null when it holds. */
async function problemOf(engine: GenerationEngine, schema: Schema, validate: (value: unknown) => boolean, result: GenerationResult, preferences: Float32Array): Promise<string | null> {
  const stopIds = engine.tokenizer.eosTokenIds;
  const ids = result.tokens.map((token) => token.id);
  const body = ids.filter((id) => !stopIds.includes(id));
  let text: string;
  if (result.finishReason === "stop") {
    if (!stopIds.includes(ids.at(-1)!)) return "finished without an end-of-text token";
    try {
      text = strictText(engine.tokenizer, body);
    } catch {
      return "malformed UTF-8";
    }
    if (text !== result.text) return `the text ${JSON.stringify(result.text)} is not its tokens' ${JSON.stringify(text)}`;
  } else {
    const constraint = await engine.grammar.constraint(jsonSchema(schema));
    let completion: number[] | null;
    try {
      completion = await completeAnswer(constraint, ids, preferences, stopIds);
    } catch (error) {
      return `a fresh matcher rejects the answer's tokens: ${(error as Error).message}`;
    } finally {
      constraint.dispose();
    }
    if (completion === null) return "the grammar cannot complete the answer";
    try {
      text = strictText(engine.tokenizer, [...body, ...completion]);
    } catch {
      return "the completed answer is malformed UTF-8";
    }
    if (!text.startsWith(result.text.replace(/\uFFFD$/, ""))) return `the completion ${JSON.stringify(text)} does not extend the text`;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return `${result.finishReason === "stop" ? "" : "completed to "}${JSON.stringify(text)}: not JSON (${(error as Error).message})`;
  }
  if (!validate(value)) return `${result.finishReason === "stop" ? "" : "completed to "}${JSON.stringify(text)}: ${ajv.errorsText((validate as unknown as { errors: unknown }).errors as never)}`;
  return null;
}

/** Samples `seeds` answers to each schema and checks every one; failures are collected, not thrown. */
export async function checkSchemaAnswers(engine: GenerationEngine, schemas: readonly Schema[], options: PropertyOptions): Promise<PropertyTally> {
  const tally: PropertyTally = { schemas: schemas.length, answers: 0, finished: 0, cut: 0, failures: [] };
  const preferences = completionPreferences(engine.tokenizer, engine.info.vocab);
  const one = async (schema: Schema) => {
    const validate = ajv.compile(schema);
    const results = await Promise.all(
      Array.from({ length: options.seeds }, async (_, seed) => {
        const constraint = await engine.grammar.constraint(jsonSchema(schema));
        const handle = engine.generate({ promptIds: options.promptIds, maxTokens: options.maxTokens, sampling: { temperature: options.temperature ?? 1, topP: 1, topK: 0, seed }, constraint });
        return { seed, result: await handle.result() };
      }),
    );
    for (const { seed, result } of results) {
      tally.answers++;
      if (result.finishReason === "stop") tally.finished++;
      else tally.cut++;
      const problem = await problemOf(engine, schema, validate, result, preferences);
      if (problem !== null) tally.failures.push({ schema, seed, finishReason: result.finishReason, text: result.text, problem });
    }
  };
  const width = options.concurrentSchemas ?? 2;
  for (let at = 0; at < schemas.length; at += width) await Promise.all(schemas.slice(at, at + width).map(one));
  return tally;
}
