/**
 * A worker thread of the quantize pool (quantizePool.ts): quantizes the values it is sent
 * and sends the bytes back (both moved, not copied).
 */
import { quantizeValues } from "./ggufQuantize.ts";

export interface QuantizeJob {
  id: number;
  type: number;
  values: Float32Array;
}

export type QuantizeReply = { id: number; bytes: Uint8Array } | { id: number; error: string };

declare const self: Worker;

self.onmessage = (event: MessageEvent<QuantizeJob>) => {
  const { id, type, values } = event.data;
  try {
    const bytes = quantizeValues(type, values);
    self.postMessage({ id, bytes } satisfies QuantizeReply, [bytes.buffer as ArrayBuffer]);
  } catch (error) {
    self.postMessage({ id, error: (error as Error).message } satisfies QuantizeReply);
  }
};
