/** The events of a request's choices, run side by side. */
import type { GenerationEvent } from "../../engine/generationTypes.ts";
import type { GenerationHandle } from "../../engine/generationHandle.ts";

export type GenerationFinish = Extract<GenerationEvent, { type: "finish" }>;

/** Runs every handle's events through `onEvent(index, event)`; rejects with the first failure (the others are cancelled). */
export async function pumpAll(handles: readonly GenerationHandle[], onEvent: (index: number, event: GenerationEvent) => void): Promise<void> {
  let failure: unknown = null;
  await Promise.all(
    handles.map(async (handle, index) => {
      try {
        for await (const event of handle) onEvent(index, event);
      } catch (error) {
        if (failure === null) {
          failure = error;
          for (const other of handles) other.cancel();
        }
      }
    }),
  );
  if (failure !== null) throw failure;
}

/** Cancels every choice. */
export function cancelAll(handles: readonly GenerationHandle[]): void {
  for (const handle of handles) handle.cancel();
}
