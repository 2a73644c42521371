/**
 * Random walks through a JSON-schema grammar's own masks (every allowed token equally likely, as
 * no model would choose), with no model: each walk that ends by grammar completion, and each cut
 * walk once completed by the grammar, must parse and validate with ajv.
 */
import Ajv from "ajv";
import type { GrammarCompiler } from "../../src/engine/grammarCompiler.ts";
import type { GrammarConstraint } from "../../src/engine/grammarConstraint.ts";
import { seededRandom } from "../../src/index/seededRandom.ts";
import type { ModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { completeAnswer, completionPreferences, strictText } from "./grammarCompletion.ts";
import type { Schema } from "./randomSchemas.ts";

const ajv = new Ajv({ strict: false });

/** The tokens the mask allows next. */
export async function allowedTokens(c: GrammarConstraint, vocab: number): Promise<number[]> {
  await c.ready();
  const masked = c.masked(new Float32Array(vocab));
  return [...masked.keys()].filter((id) => masked[id] !== -Infinity);
}

export interface WalkTally {
  walks: number;
  finished: number;
  failures: string[];
}

/** `walksEach` random walks per schema (seeded by `seed`, the schema's position and the walk). */
export async function walkSchemas(compiler: GrammarCompiler, tokenizer: ModelTokenizer, vocab: number, schemas: readonly Schema[], walksEach: number, seed = 1): Promise<WalkTally> {
  const preferences = completionPreferences(tokenizer, vocab);
  const constraint = (schema: Schema) => compiler.constraint({ spec: { kind: "json_schema", schema }, field: "response_format" });
  const tally: WalkTally = { walks: 0, finished: 0, failures: [] };
  for (const [index, schema] of schemas.entries()) {
    const validate = ajv.compile(schema);
    for (let walk = 0; walk < walksEach; walk++) {
      const random = seededRandom(seed * 100_003 + index * 10 + walk + 1);
      const c = await constraint(schema);
      const ids: number[] = [];
      const budget = 20 + Math.floor(random() * 100);
      while (!c.terminated && ids.length < budget) {
        const choices = await allowedTokens(c, vocab);
        const id = choices[Math.floor(random() * choices.length)]!;
        c.accept(id);
        ids.push(id, ...(await c.jumpForward(budget)));
      }
      const done = c.terminated;
      c.dispose();
      let completion: number[] | null = [];
      if (!done) {
        const fresh = await constraint(schema);
        completion = await completeAnswer(fresh, ids, preferences, tokenizer.eosTokenIds);
        fresh.dispose();
      }
      tally.walks++;
      if (done) tally.finished++;
      const body = [...ids, ...(completion ?? [])].filter((id) => !tokenizer.eosTokenIds.includes(id));
      let text = "";
      try {
        if (completion === null) throw new Error("no completion");
        text = strictText(tokenizer, body);
        if (!validate(JSON.parse(text))) throw new Error(ajv.errorsText(validate.errors));
      } catch (error) {
        tally.failures.push(`${JSON.stringify(schema)} ${JSON.stringify(text)}: ${(error as Error).message}`);
      }
    }
  }
  return tally;
}
