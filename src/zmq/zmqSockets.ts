/**
 * A bound ZeroMQ PUB socket and a bound ROUTER socket over node:net, speaking ZMTP 3.1 with NULL
 * security (zmtp.ts), enough for KV events out: any libzmq SUB, XSUB, DEALER or REQ (pyzmq,
 * zeromq.js, Rust's zmq, Go's zmq4) connects to them.
 *
 * - PUB: a message goes to every peer with a subscription that is a prefix of its first frame
 *   (subscriptions arrive as ZMTP 3.1 SUBSCRIBE/CANCEL commands or as ZMTP 3.0 messages starting
 *   with 1/0). A peer that does not keep up loses messages, as with libzmq's high-water mark.
 * - ROUTER: each peer has an identity (the one it announced, else a generated one); messages
 *   arrive with it and answers go to it.
 *
 * Both hold at most `maxPeers` connections (one over is closed as it is accepted, and counted), and
 * a peer that has not completed the greeting and READY handshake `handshakeTimeoutMs` after it
 * connected is closed: idle or half-open connections cannot use up the process's descriptors.
 */
import { createServer, type AddressInfo, type Server } from "node:net";
import { formatTcpEndpoint, type TcpEndpoint } from "./tcpEndpoint.ts";
import { encodeMessage } from "./zmtp.ts";
import { ZmtpConnection } from "./zmtpConnection.ts";

/** The largest frame a peer may send (they send subscriptions and replay requests only). */
const MAX_INCOMING_FRAME_BYTES = 64 * 1024;
/** How long a closing socket lets its peers read what is queued for them. */
const CLOSE_GRACE_MS = 1000;

export interface BoundSocketLimits {
  /** Connections held at once (default DEFAULT_MAX_PEERS). */
  maxPeers?: number;
  /** A peer not through the handshake this long after connecting is closed (default DEFAULT_HANDSHAKE_TIMEOUT_MS). */
  handshakeTimeoutMs?: number;
}

/** Far above the routers an engine serves (Dynamo, llm-d and ctxr's proxy hold one connection each). */
export const DEFAULT_MAX_PEERS = 256;
export const DEFAULT_HANDSHAKE_TIMEOUT_MS = 5000;

function bindFailure(error: NodeJS.ErrnoException): string {
  switch (error.code) {
    case "EADDRINUSE":
      return "the port is in use";
    case "EADDRNOTAVAIL":
      return "no such local address";
    case "EACCES":
      return "permission denied";
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return "unknown host";
    default:
      return error.message;
  }
}

/** A net server bound at an endpoint, with its peers. */
abstract class BoundSocket {
  protected readonly peers = new Set<ZmtpConnection>();
  private readonly server: Server;
  private closed = false;
  private readonly maxPeers: number;
  private readonly handshakeTimeoutMs: number;
  /** Connections closed at once because `maxPeers` were held. */
  refusedPeers = 0;
  /** Connections closed because their handshake did not complete in time. */
  handshakeTimeouts = 0;

  protected constructor(
    private readonly ownType: string,
    private readonly peerTypes: readonly string[],
    limits: BoundSocketLimits,
  ) {
    this.maxPeers = limits.maxPeers ?? DEFAULT_MAX_PEERS;
    this.handshakeTimeoutMs = limits.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS;
    this.server = createServer((socket) => {
      if (this.closed) return void socket.destroy();
      if (this.peers.size >= this.maxPeers) {
        this.refusedPeers++;
        return void socket.destroy();
      }
      const peer = new ZmtpConnection(
        socket,
        { ownType: this.ownType, peerTypes: this.peerTypes, maxFrameBytes: MAX_INCOMING_FRAME_BYTES },
        {
          ready: (p) => {
            clearTimeout(deadline);
            this.ready(p);
          },
          message: (p, frames) => this.message(p, frames),
          command: (p, name, data) => this.command(p, name, data),
        },
      );
      const deadline = setTimeout(() => {
        if (peer.ready || socket.destroyed) return;
        this.handshakeTimeouts++;
        socket.destroy();
      }, this.handshakeTimeoutMs);
      deadline.unref?.();
      this.peers.add(peer);
      socket.on("close", () => {
        clearTimeout(deadline);
        this.peers.delete(peer);
        this.gone(peer);
      });
    });
  }

  /** Listens at `endpoint`; rejects with why it cannot, in words. */
  protected async listen(endpoint: TcpEndpoint): Promise<void> {
    try {
      await new Promise<void>((resolve, reject) => {
        this.server.once("error", reject);
        this.server.listen({ host: endpoint.host ?? undefined, port: endpoint.port }, () => {
          this.server.off("error", reject);
          resolve();
        });
      });
    } catch (error) {
      this.closed = true;
      throw new Error(`cannot bind ${formatTcpEndpoint(endpoint.host, endpoint.port)}: ${bindFailure(error as NodeJS.ErrnoException)}`);
    }
  }

  /** The bound endpoint, with the port actually bound. */
  endpoint(requested: TcpEndpoint): string {
    return formatTcpEndpoint(requested.host, (this.server.address() as AddressInfo).port);
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  /** Connections held now (through the handshake or not). */
  get peerCount(): number {
    return this.peers.size;
  }

  /** Bytes written to peers and not yet taken by the system. */
  get queuedBytes(): number {
    let bytes = 0;
    for (const peer of this.peers) bytes += peer.socket.writableLength;
    return bytes;
  }

  /** Peers through the handshake. */
  get connected(): number {
    let count = 0;
    for (const peer of this.peers) if (peer.ready) count++;
    return count;
  }

  /** Stops listening; peers get what was sent them, then are disconnected (cut after CLOSE_GRACE_MS). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const stopped = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const peer of this.peers) peer.socket.end();
    const cut = setTimeout(() => {
      for (const peer of this.peers) peer.socket.destroy();
    }, CLOSE_GRACE_MS);
    await stopped;
    clearTimeout(cut);
  }

  protected ready(_peer: ZmtpConnection): void {}
  protected abstract message(peer: ZmtpConnection, frames: Uint8Array[]): void;
  protected command(_peer: ZmtpConnection, _name: string, _data: Uint8Array): void {}
  protected gone(_peer: ZmtpConnection): void {}
}

export class PubSocket extends BoundSocket {
  /** Each peer's subscriptions (latin1 strings of their bytes) with their counts. */
  private readonly subscriptions = new Map<ZmtpConnection, Map<string, number>>();
  private droppedCount = 0;

  private constructor(limits: BoundSocketLimits) {
    super("PUB", ["SUB", "XSUB"], limits);
  }

  static async bind(endpoint: TcpEndpoint, limits: BoundSocketLimits = {}): Promise<PubSocket> {
    const socket = new PubSocket(limits);
    await socket.listen(endpoint);
    return socket;
  }

  /** Peers with at least one subscription. */
  get subscribers(): number {
    let count = 0;
    for (const topics of this.subscriptions.values()) if (topics.size > 0) count++;
    return count;
  }

  /** Messages not sent to a peer because its queue was full. */
  get dropped(): number {
    return this.droppedCount;
  }

  /** Sends a multipart message to every peer subscribed to a prefix of its first frame. */
  send(frames: readonly Uint8Array[]): void {
    const topic = Buffer.from(frames[0] ?? new Uint8Array(0)).toString("latin1");
    let bytes: Uint8Array | null = null;
    for (const [peer, topics] of this.subscriptions) {
      if (![...topics.keys()].some((prefix) => topic.startsWith(prefix))) continue;
      bytes ??= encodeMessage(frames);
      if (!peer.send(bytes)) this.droppedCount++;
    }
  }

  protected override ready(peer: ZmtpConnection): void {
    this.subscriptions.set(peer, new Map());
  }

  protected override command(peer: ZmtpConnection, name: string, data: Uint8Array): void {
    if (name === "SUBSCRIBE") this.subscribe(peer, data, true);
    else if (name === "CANCEL") this.subscribe(peer, data, false);
  }

  protected message(peer: ZmtpConnection, frames: Uint8Array[]): void {
    // ZMTP 3.0 subscriptions: a one-frame message, 1 (subscribe) or 0 (cancel), then the prefix.
    const body = frames[0];
    if (frames.length !== 1 || body === undefined || body.length === 0 || body[0]! > 1) return;
    this.subscribe(peer, body.subarray(1), body[0] === 1);
  }

  protected override gone(peer: ZmtpConnection): void {
    this.subscriptions.delete(peer);
  }

  private subscribe(peer: ZmtpConnection, prefix: Uint8Array, add: boolean): void {
    const topics = this.subscriptions.get(peer);
    if (topics === undefined) return;
    const key = Buffer.from(prefix).toString("latin1");
    const count = (topics.get(key) ?? 0) + (add ? 1 : -1);
    if (count > 0) topics.set(key, count);
    else topics.delete(key);
  }
}

let nextGeneratedIdentity = Math.floor(Math.random() * 0x1_0000_0000);

export class RouterSocket extends BoundSocket {
  private readonly byIdentity = new Map<string, ZmtpConnection>();
  private readonly identities = new Map<ZmtpConnection, Uint8Array>();

  private constructor(
    private readonly onMessage: (identity: Uint8Array, frames: Uint8Array[]) => void,
    limits: BoundSocketLimits,
  ) {
    super("ROUTER", ["DEALER", "REQ", "ROUTER"], limits);
  }

  /** `onMessage` gets each peer message with the peer's identity (what `send` takes back). */
  static async bind(endpoint: TcpEndpoint, onMessage: (identity: Uint8Array, frames: Uint8Array[]) => void, limits: BoundSocketLimits = {}): Promise<RouterSocket> {
    const socket = new RouterSocket(onMessage, limits);
    await socket.listen(endpoint);
    return socket;
  }

  /** Sends `frames` to the peer with `identity`; false when it is gone or not keeping up. */
  send(identity: Uint8Array, frames: readonly Uint8Array[]): boolean {
    const peer = this.byIdentity.get(Buffer.from(identity).toString("latin1"));
    return peer !== undefined && peer.send(encodeMessage(frames));
  }

  protected override ready(peer: ZmtpConnection): void {
    let identity = peer.metadata?.get("identity");
    // Like libzmq: an announced identity starting with a zero byte is ours to make; a taken one is refused.
    if (identity !== undefined && identity.length > 0 && identity[0] !== 0) {
      if (this.byIdentity.has(Buffer.from(identity).toString("latin1"))) return void peer.socket.destroy();
    } else {
      identity = new Uint8Array(5);
      new DataView(identity.buffer).setUint32(1, nextGeneratedIdentity++ >>> 0, false);
      nextGeneratedIdentity %= 0x1_0000_0000;
    }
    this.identities.set(peer, identity);
    this.byIdentity.set(Buffer.from(identity).toString("latin1"), peer);
  }

  protected message(peer: ZmtpConnection, frames: Uint8Array[]): void {
    const identity = this.identities.get(peer);
    if (identity !== undefined) this.onMessage(identity, frames);
  }

  protected override gone(peer: ZmtpConnection): void {
    const identity = this.identities.get(peer);
    if (identity === undefined) return;
    this.identities.delete(peer);
    this.byIdentity.delete(Buffer.from(identity).toString("latin1"));
  }
}
