/** What the generation handlers take from the server's settings. */
import type { EventStreamOptions } from "../generationEventStream.ts";

export interface GenerationHandlerOptions {
  /** Levels of JSON nesting a body may have, ignored fields included. */
  maxJsonDepth: number;
  stream: EventStreamOptions;
}
