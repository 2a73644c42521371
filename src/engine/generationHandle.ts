/** A submitted request as its caller holds it: its events, its whole result, and cancel. */
import { GenerationFailedError } from "./generationErrors.ts";
import type { GeneratedToken, GenerationEvent, GenerationResult } from "./generationTypes.ts";
import type { Sequence } from "./sequence.ts";

/** A submitted request: its events as an async iterable, or its whole result. */
export class GenerationHandle implements AsyncIterable<GenerationEvent> {
  constructor(
    private readonly sequence: Sequence,
    private readonly onCancel: () => void,
  ) {}

  get promptTokens(): number {
    return this.sequence.promptLength;
  }

  [Symbol.asyncIterator](): AsyncIterator<GenerationEvent> {
    return this.sequence.events.drain();
  }

  /** Stops generating (frees the request's KV blocks at the next step); later events are dropped. */
  cancel(): void {
    if (this.sequence.done || this.sequence.cancelled) return;
    this.sequence.cancelled = true;
    this.sequence.events.end();
    this.onCancel();
  }

  /** Collects every event into the whole result. */
  async result(): Promise<GenerationResult> {
    let text = "";
    const tokens: GeneratedToken[] = [];
    for await (const event of this) {
      if (event.type === "delta") {
        text += event.text;
        tokens.push(...event.tokens);
      } else {
        return {
          text,
          tokens,
          finishReason: event.reason,
          promptTokens: event.promptTokens,
          completionTokens: event.completionTokens,
          ...(event.reasoningTokens !== undefined ? { reasoningTokens: event.reasoningTokens } : {}),
          ctxr: event.ctxr,
          ...(event.promptLogprobs !== undefined ? { promptLogprobs: event.promptLogprobs } : {}),
        };
      }
    }
    throw new GenerationFailedError("the request was cancelled");
  }
}
