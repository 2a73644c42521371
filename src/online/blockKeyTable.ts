/**
 * Block keys ("s:doc-7", "t:<hash>", ...) as dense numbers for the live index.
 * A number is released when no context in the index holds its block any more
 * and is given to the next new key, so the table (and the index's per-block
 * arrays) stay as large as what the index holds, not as everything ever sent.
 */
import { estimatedStringBytes, KEY_ENTRY_BYTES } from "./memoryEstimates.ts";

export class BlockKeyTable {
  private readonly numbers = new Map<string, number>();
  private readonly keys: (string | undefined)[] = [];
  private readonly free: number[] = [];
  private byteTotal = 0;

  /** Keys held. */
  get size(): number {
    return this.numbers.size;
  }

  /** Estimated heap bytes of the table. */
  get bytes(): number {
    return this.byteTotal + this.keys.length * 8;
  }

  /** The key's number, assigning one (a released number first) to a new key. */
  intern(key: string): number {
    let n = this.numbers.get(key);
    if (n === undefined) {
      n = this.free.pop() ?? this.keys.length;
      this.numbers.set(key, n);
      this.keys[n] = key;
      this.byteTotal += KEY_ENTRY_BYTES + estimatedStringBytes(key);
    }
    return n;
  }

  keyOf(n: number): string {
    const key = this.keys[n];
    if (key === undefined) throw new Error(`block number ${n} is not in use`);
    return key;
  }

  /** Frees a number (its block left the index). */
  release(n: number): void {
    const key = this.keys[n];
    if (key === undefined) return;
    this.numbers.delete(key);
    this.keys[n] = undefined;
    this.free.push(n);
    this.byteTotal -= KEY_ENTRY_BYTES + estimatedStringBytes(key);
  }

  clear(): void {
    this.numbers.clear();
    this.keys.length = 0;
    this.free.length = 0;
    this.byteTotal = 0;
  }
}
