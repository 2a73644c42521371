/**
 * Faults between the fake engine's KV events publisher and its PUB socket (the publisher's
 * `transmit` hook): live messages dropped (lost on the way; the replay buffer still has them) or
 * held back and sent after the next one (out of order).
 */

type Frames = readonly Uint8Array[];

function sequenceOf(frames: Frames): number {
  const seq = frames[1]!;
  return Number(new DataView(seq.buffer, seq.byteOffset, 8).getBigUint64(0, false));
}

export class WireFaults {
  private dropNext = 0;
  private readonly dropSeqs = new Set<number>();
  private holdNext = 0;
  private held: Frames[] = [];
  private send: ((frames: Frames) => void) | null = null;
  /** Live messages dropped so far. */
  dropped = 0;

  /** Drops the next `count` live messages. */
  drop(count = 1): void {
    this.dropNext += count;
  }

  /** Drops the live messages with these sequence numbers. */
  dropSequence(...seqs: number[]): void {
    for (const seq of seqs) this.dropSeqs.add(seq);
  }

  /** Holds the next `count` live messages back; they go out after the message that follows them. */
  reorder(count = 1): void {
    this.holdNext += count;
  }

  /** Sends the messages held back now. */
  release(): void {
    const held = this.held;
    this.held = [];
    for (const frames of held) this.send?.(frames);
  }

  readonly transmit = (frames: Uint8Array[], send: (frames: Frames) => void): void => {
    this.send = send;
    if (this.dropNext > 0 || this.dropSeqs.delete(sequenceOf(frames))) {
      if (this.dropNext > 0) this.dropNext--;
      this.dropped++;
      return;
    }
    if (this.holdNext > 0) {
      this.holdNext--;
      this.held.push(frames);
      return;
    }
    send(frames);
    this.release();
  };
}
