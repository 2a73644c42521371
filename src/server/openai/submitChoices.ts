/** The choices of a request queued on the engine: `n` generations of each prompt. */
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import { PromptTooLongError } from "../../engine/generationErrors.ts";
import type { GenerationHandle } from "../../engine/generationHandle.ts";
import type { GrammarConstraint } from "../../engine/grammarConstraint.ts";
import { LogitsAdjustmentError } from "../../engine/logitsAdjuster.ts";
import { SamplingError } from "../../engine/sampler.ts";
import { InvalidRequest } from "./invalidRequest.ts";
import { promptTooLong } from "./requestChecks.ts";

/**
 * Submits every prompt, `n` times each (choice index = prompt index · n + k; sibling k > 0 of a
 * seeded request samples with seed + k, so the choices differ); if one is refused, the ones
 * already queued are cancelled. Siblings are queued together, so the first computes the prompt
 * and the others start from its blocks (generationScheduler.ts: shared prefixes computed once).
 */
export function submitAll(
  engine: GenerationEngine,
  prompts: number[][],
  n: number,
  constraints: readonly GrammarConstraint[],
  build: (promptIds: number[]) => Parameters<GenerationEngine["generate"]>[0],
): GenerationHandle[] {
  const handles: GenerationHandle[] = [];
  try {
    prompts.forEach((promptIds, index) => {
      try {
        const request = build(promptIds);
        for (let k = 0; k < n; k++) {
          const seed = request.sampling.seed;
          const constraint = constraints[handles.length];
          // Prompt logprobs come from the first sibling (the others start from its cached blocks).
          const sibling = k === 0 ? request : { ...request, promptLogprobs: null, sampling: seed === undefined ? request.sampling : { ...request.sampling, seed: seed + k } };
          handles.push(engine.generate(constraint === undefined ? sibling : { ...sibling, constraint }));
        }
      } catch (error) {
        if (error instanceof PromptTooLongError) {
          throw promptTooLong(error, error.field === "prompt" && prompts.length > 1 ? `prompt[${index}]` : error.field);
        }
        if (error instanceof SamplingError) throw new InvalidRequest("body", error.message);
        if (error instanceof LogitsAdjustmentError) throw new InvalidRequest(error.field, error.message);
        throw error;
      }
    });
  } catch (error) {
    for (const handle of handles) handle.cancel();
    for (const constraint of constraints.slice(handles.length)) constraint.dispose();
    throw error;
  }
  return handles;
}
