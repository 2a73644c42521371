/**
 * Quantizing on several threads: a tensor's values are cut into runs of whole blocks, one
 * per worker (quantizeWorker.ts), and the bytes put back together in order; the result is
 * the same bytes as quantizeValues (blocks are independent). With one thread, or values
 * too few to be worth a message, the work is done inline.
 *
 *   const pool = new QuantizePool(4);
 *   const bytes = await pool.quantize(GGML_TYPE.Q4_K, values);
 *   pool.close();
 */
import { QUANTIZE_WORKER_ENTRY, insideSingleBinary } from "../../workerEntries.ts";
import { quantizeValues } from "./ggufQuantize.ts";
import { ggmlTypeInfo } from "./ggufTypes.ts";
import type { QuantizeJob, QuantizeReply } from "./quantizeWorker.ts";
import { startModuleWorker } from "../../runtime/workers.ts";

/** Below this many values per thread, a tensor is quantized inline. */
const MIN_VALUES_PER_THREAD = 1 << 16;

function workerEntry(): string {
  return insideSingleBinary() ? QUANTIZE_WORKER_ENTRY : new URL("./quantizeWorker.ts", import.meta.url).href;
}

export class QuantizePool {
  private readonly workers: Worker[] = [];
  private readonly pending = new Map<number, { resolve(bytes: Uint8Array): void; reject(error: Error): void }>();
  private nextId = 0;

  constructor(readonly threads: number) {
    if (!Number.isSafeInteger(threads) || threads < 1) throw new RangeError(`threads must be a positive integer, got ${threads}`);
  }

  private worker(index: number): Worker {
    let worker = this.workers[index];
    if (!worker) {
      worker = startModuleWorker(workerEntry());
      worker.onmessage = (event: MessageEvent<QuantizeReply>) => {
        const reply = event.data;
        const waiting = this.pending.get(reply.id);
        if (!waiting) return;
        this.pending.delete(reply.id);
        if ("error" in reply) waiting.reject(new Error(reply.error));
        else waiting.resolve(reply.bytes);
      };
      worker.onerror = (event) => {
        for (const waiting of this.pending.values()) waiting.reject(new Error(`quantize worker failed: ${event.message}`));
        this.pending.clear();
      };
      this.workers[index] = worker;
    }
    return worker;
  }

  private run(index: number, type: number, values: Float32Array): Promise<Uint8Array> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker(index).postMessage({ id, type, values } satisfies QuantizeJob, [values.buffer as ArrayBuffer]);
    });
  }

  /** quantizeValues(type, values) on the pool's threads; `values` is left as it was. */
  async quantize(type: number, values: Float32Array): Promise<Uint8Array> {
    const info = ggmlTypeInfo(type);
    const blocks = values.length / info.blockSize;
    const parts = Math.min(this.threads, Math.floor(values.length / MIN_VALUES_PER_THREAD));
    if (parts <= 1 || !Number.isInteger(blocks)) return quantizeValues(type, values);
    const blocksPerPart = Math.ceil(blocks / parts);
    const runs: Promise<Uint8Array>[] = [];
    for (let part = 0; part * blocksPerPart < blocks; part++) {
      const start = part * blocksPerPart * info.blockSize;
      const end = Math.min(values.length, (part + 1) * blocksPerPart * info.blockSize);
      runs.push(this.run(part, type, values.slice(start, end)));
    }
    const pieces = await Promise.all(runs);
    const out = new Uint8Array(blocks * info.blockBytes);
    let offset = 0;
    for (const piece of pieces) {
      out.set(piece, offset);
      offset += piece.length;
    }
    return out;
  }

  close(): void {
    for (const worker of this.workers) worker?.terminate();
    this.workers.length = 0;
    for (const waiting of this.pending.values()) waiting.reject(new Error("quantize pool closed"));
    this.pending.clear();
  }
}
