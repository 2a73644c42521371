/**
 * The structured-outputs property (issue 20 item 6) on real models through the engine: sampled
 * answers (temperature 1, seeds 0..k-1) to 60 seeded random JSON schemas (test/helpers/randomSchemas.ts)
 * on a random-weight tiny model, which follows the schema only because of the masks, and on the
 * trained quality model through its chat template. Every answer that finished by grammar
 * completion must be exactly its tokens' well-formed text and validate with ajv; every answer cut
 * by max_tokens must be a prefix of a valid answer (the grammar completes it, and the completion
 * validates). 840 answers, at least 500 of them finished (the target). The engine is used
 * directly (not HTTP) to get the answers' token ids.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { GenerationEngine } from "../../src/engine/generationEngine.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { randomSchema } from "../helpers/randomSchemas.ts";
import { checkSchemaAnswers } from "../helpers/structuredProperty.ts";

setDefaultTimeout(120_000);

const QUALITY_MODEL = join(import.meta.dir, "../../models/quality");
const SCHEMAS = Array.from({ length: 60 }, (_, i) => randomSchema(11, i));

let tiny: { path: string; cleanup(): void };
let engines: GenerationEngine[] = [];

beforeAll(async () => {
  tiny = tinyModelFolder({}, "tiny-property");
  const runner = buildRunner();
  engines = await Promise.all([tiny.path, QUALITY_MODEL].map((model) => GenerationEngine.open({ model, runner, kvBlocks: 512, threads: 1 })));
}, 300_000);

afterAll(async () => {
  await Promise.all(engines.map((engine) => engine.close()));
  tiny?.cleanup();
});

describe("structured outputs over random schemas", () => {
  test("random-weight tiny model: 60 schemas x 8 answers, all finished ones valid, all cut ones valid prefixes", async () => {
    const engine = engines[0]!;
    const tally = await checkSchemaAnswers(engine, SCHEMAS, { promptIds: engine.completionPromptIds("JSON:"), seeds: 8, maxTokens: 160, concurrentSchemas: 4 });
    expect(tally.failures).toEqual([]);
    expect(tally.answers).toBe(480);
    expect(tally.finished).toBeGreaterThanOrEqual(300);
    expect(tally.cut).toBeGreaterThan(0);
  });

  test("trained quality model (chat template): 60 schemas x 6 answers, all finished ones valid, all cut ones valid prefixes", async () => {
    const engine = engines[1]!;
    const promptIds = engine.chatPromptIds([{ role: "user", content: "Answer in JSON." }]);
    const tally = await checkSchemaAnswers(engine, SCHEMAS, { promptIds, seeds: 6, maxTokens: 160, concurrentSchemas: 4 });
    expect(tally.failures).toEqual([]);
    expect(tally.answers).toBe(360);
    expect(tally.finished).toBeGreaterThanOrEqual(200);
    expect(tally.cut).toBeGreaterThan(0);
  });
});
