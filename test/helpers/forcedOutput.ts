/**
 * Forces a random-weight model's answers into a chosen shape: the engine's next generation follows
 * a regex over the whole answer (the model's random weights choose among what it allows), in place
 * of the request's own constraint and without the reasoning gate, so that an answer can be made
 * to think in `<think>…</think>` with its markers written whole or byte by byte.
 */
import type { GenerationEngine } from "../../src/engine/generationEngine.ts";
import type { GrammarConstraint } from "../../src/engine/grammarConstraint.ts";

export interface ForcedOutput {
  /** The next generation follows `pattern`. */
  next(pattern: string): Promise<void>;
  restore(): void;
}

export function forceOutputs(engine: GenerationEngine): ForcedOutput {
  const queue: GrammarConstraint[] = [];
  const generate = engine.generate;
  engine.generate = (request) => {
    const forced = queue.shift();
    if (forced === undefined) return generate.call(engine, request);
    request.constraint?.dispose();
    const { reasoning: _, ...rest } = request;
    return generate.call(engine, { ...rest, constraint: forced });
  };
  return {
    async next(pattern) {
      queue.push(await engine.grammar.constraint({ field: "guided_regex", spec: { kind: "regex", pattern } }));
    },
    restore() {
      engine.generate = generate;
      for (const constraint of queue.splice(0)) constraint.dispose();
    },
  };
}
