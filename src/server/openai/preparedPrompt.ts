/** engine.prepare with a prompt that cannot be built answered as the 400 naming its field. */
import type { GenerationEngine } from "../../engine/generationEngine.ts";
import { PromptError, type PreparedPrompt, type PromptRequest } from "../../engine/promptPreparation.ts";
import { InvalidRequest } from "./invalidRequest.ts";

export async function preparedPrompt(engine: GenerationEngine, request: PromptRequest): Promise<PreparedPrompt> {
  try {
    return await engine.prepare(request);
  } catch (error) {
    if (error instanceof PromptError) throw new InvalidRequest(error.field, error.message);
    throw error;
  }
}
