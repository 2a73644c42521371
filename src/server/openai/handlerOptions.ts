/** What the generation handlers take from the server's settings. */
import type { EventStreamOptions } from "../generationEventStream.ts";

export interface GenerationHandlerOptions {
  stream: EventStreamOptions;
}
