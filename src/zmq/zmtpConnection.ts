/**
 * One ZMTP connection over a TCP socket, accepted or dialled (NULL security has no roles): the
 * greeting, the READY handshake (checking the peer's socket type), then whole messages and
 * commands. PINGs are answered; an ERROR command or anything that breaks the protocol closes
 * the socket.
 */
import type { Socket } from "node:net";
import { FrameReader, GREETING_BYTES, ZmtpError, greeting, parseCommand, parseGreeting, parseMetadata, pongCommand, readyCommand, signatureMismatch, type Frame } from "./zmtp.ts";

/** Bytes queued for one peer beyond which its messages are dropped (libzmq's high-water mark, in bytes). */
export const PEER_QUEUE_LIMIT_BYTES = 64 * 1024 * 1024;

export interface ZmtpConnectionHandlers {
  ready(connection: ZmtpConnection): void;
  /** A whole message; `oversized`: a frame of it was over the limit and is empty here. */
  message(connection: ZmtpConnection, frames: Uint8Array[], oversized: boolean): void;
  /** Commands other than READY, PING, PONG and ERROR. */
  command?(connection: ZmtpConnection, name: string, data: Uint8Array): void;
}

export interface ZmtpConnectionOptions {
  ownType: string;
  /** Socket types this one may talk to. */
  peerTypes: readonly string[];
  maxFrameBytes: number;
  /** Skip frames over `maxFrameBytes` (their message arrives marked oversized) instead of closing. */
  skipOversized?: boolean;
}

export class ZmtpConnection {
  private received: Uint8Array = new Uint8Array(0);
  private reader: FrameReader | null = null;
  private parts: Uint8Array[] = [];
  private partsOversized = false;
  /** The peer's READY metadata; null until the handshake is done. */
  metadata: Map<string, Uint8Array> | null = null;
  /** The minor ZMTP version the peer greeted with (0: ZMTP 3.0, which has no PING or SUBSCRIBE commands). */
  peerMinor = 0;
  /** When bytes last arrived (Date.now()). */
  lastReceivedAt = Date.now();

  constructor(
    readonly socket: Socket,
    private readonly options: ZmtpConnectionOptions,
    private readonly handlers: ZmtpConnectionHandlers,
  ) {
    socket.setNoDelay(true);
    socket.on("data", (chunk: Buffer) => {
      this.lastReceivedAt = Date.now();
      try {
        this.receive(chunk);
      } catch {
        socket.destroy();
      }
    });
    socket.on("error", () => socket.destroy());
    socket.write(greeting());
  }

  get ready(): boolean {
    return this.metadata !== null && !this.socket.destroyed;
  }

  /** Writes encoded bytes after the handshake; false when not ready or the peer is not keeping up. */
  send(bytes: Uint8Array): boolean {
    if (!this.ready) return false;
    if (this.socket.writableLength > PEER_QUEUE_LIMIT_BYTES) return false;
    this.socket.write(bytes);
    return true;
  }

  private receive(chunk: Uint8Array): void {
    if (this.reader === null) {
      this.received = Buffer.concat([this.received, chunk]);
      const mismatch = signatureMismatch(this.received);
      if (mismatch !== null) throw new ZmtpError(mismatch);
      if (this.received.length < GREETING_BYTES) return;
      const peer = parseGreeting(this.received);
      if (peer.mechanism !== "NULL") throw new ZmtpError(`security mechanism ${peer.mechanism} is not supported (NULL is)`);
      this.peerMinor = peer.major > 3 ? 1 : peer.minor;
      this.reader = new FrameReader(this.options.maxFrameBytes, this.options.skipOversized ?? false);
      this.socket.write(readyCommand(this.options.ownType));
      chunk = this.received.subarray(GREETING_BYTES);
      this.received = new Uint8Array(0);
    }
    for (const frame of this.reader.push(chunk)) this.frame(frame);
  }

  private frame(frame: Frame): void {
    if (frame.command && frame.oversized) throw new ZmtpError("an oversized command frame");
    if (this.metadata === null) {
      if (!frame.command) throw new ZmtpError("a message before the handshake");
      const { name, data } = parseCommand(frame.body);
      if (name !== "READY") throw new ZmtpError(`expected READY, got ${name}`);
      const metadata = parseMetadata(data);
      const type = new TextDecoder().decode(metadata.get("socket-type") ?? new Uint8Array(0));
      if (!this.options.peerTypes.includes(type)) throw new ZmtpError(`a ${type || "typeless"} socket cannot talk to ${this.options.ownType}`);
      this.metadata = metadata;
      this.handlers.ready(this);
      return;
    }
    if (frame.command) {
      const { name, data } = parseCommand(frame.body);
      if (name === "PING") this.socket.write(pongCommand(data));
      else if (name === "ERROR") this.socket.destroy();
      else if (name !== "PONG") this.handlers.command?.(this, name, data);
      return;
    }
    this.parts.push(frame.body);
    if (frame.oversized) this.partsOversized = true;
    if (frame.more) return;
    const message = this.parts;
    const oversized = this.partsOversized;
    this.parts = [];
    this.partsOversized = false;
    this.handlers.message(this, message, oversized);
  }
}
