/**
 * ZeroMQ SUB and DEALER sockets that connect (ZMTP 3.1, NULL security, over node:net), for KV
 * events in: they talk to any libzmq PUB or ROUTER (vLLM's and SGLang's publishers) and to
 * ctxr's own.
 *
 * Like libzmq's, they keep trying: a refused or lost connection is dialled again after a delay
 * that starts at `reconnectMs` and doubles up to `maxReconnectMs` (back to the start once a
 * handshake succeeds). A peer that does not finish the handshake in `handshakeTimeoutMs`, or
 * sends nothing for three heartbeats (PINGs every `heartbeatMs`, which ZMTP 3.1 peers answer),
 * is dropped and dialled again: a half-open TCP connection would otherwise look like a quiet
 * engine forever.
 */
import { connect } from "node:net";
import { formatTcpEndpoint, type TcpEndpoint } from "./tcpEndpoint.ts";
import { encodeMessage, pingCommand, subscription } from "./zmtp.ts";
import { ZmtpConnection } from "./zmtpConnection.ts";

export interface ConnectingSocketOptions {
  /** First delay before dialling again (default 100 ms, libzmq's). */
  reconnectMs?: number;
  /** Longest delay (default 5000 ms). */
  maxReconnectMs?: number;
  handshakeTimeoutMs?: number;
  /** PING interval; 0: none (default 5000 ms). */
  heartbeatMs?: number;
  /** Frames over this size are skipped, their message delivered marked oversized (default 64 MiB). */
  maxFrameBytes?: number;
}

const DEFAULTS: Required<ConnectingSocketOptions> = {
  reconnectMs: 100,
  maxReconnectMs: 5000,
  handshakeTimeoutMs: 10_000,
  heartbeatMs: 5000,
  maxFrameBytes: 64 * 1024 * 1024,
};

export interface ConnectingSocketEvents {
  /** A whole message; `oversized`: one of its frames was over the limit and is empty here. */
  message(frames: Uint8Array[], oversized: boolean): void;
  /** A handshake succeeded (the first connection or a later one). */
  connected?(): void;
  /** A connection that had been through the handshake is gone (it will be dialled again). */
  disconnected?(): void;
}

abstract class ConnectingSocket {
  private connection: ZmtpConnection | null = null;
  private readonly settings: Required<ConnectingSocketOptions>;
  private delay: number;
  private redial: ReturnType<typeof setTimeout> | null = null;
  private heartbeat: ReturnType<typeof setInterval> | null = null;
  private closed = false;
  private started = false;
  /** Handshakes completed so far. */
  connections = 0;

  protected constructor(
    readonly endpoint: TcpEndpoint & { host: string },
    private readonly ownType: string,
    private readonly peerTypes: readonly string[],
    protected readonly events: ConnectingSocketEvents,
    options: ConnectingSocketOptions,
  ) {
    this.settings = { ...DEFAULTS, ...options };
    this.delay = this.settings.reconnectMs;
  }

  /** `tcp://HOST:PORT` as dialled. */
  get address(): string {
    return formatTcpEndpoint(this.endpoint.host, this.endpoint.port);
  }

  /** Through the handshake now. */
  get connected(): boolean {
    return this.connection?.ready ?? false;
  }

  /** Starts dialling (again after close: no). */
  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    this.dial();
  }

  /** Sends a multipart message; false when not connected or the peer is not keeping up. */
  protected sendFrames(frames: readonly Uint8Array[]): boolean {
    return this.connection?.send(encodeMessage(frames)) ?? false;
  }

  /** Drops the connection now (it is dialled again, as after any loss). */
  reconnect(): void {
    this.connection?.socket.destroy();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.redial !== null) clearTimeout(this.redial);
    this.stopHeartbeat();
    const socket = this.connection?.socket;
    this.connection = null;
    if (socket === undefined || socket.destroyed) return;
    await new Promise<void>((resolve) => {
      socket.once("close", () => resolve());
      socket.destroy();
    });
  }

  protected onReady(_connection: ZmtpConnection): void {}

  private dial(): void {
    this.redial = null;
    if (this.closed) return;
    const socket = connect({ host: this.endpoint.host, port: this.endpoint.port });
    let wasReady = false;
    const handshake = setTimeout(() => socket.destroy(), this.settings.handshakeTimeoutMs);
    const connection = new ZmtpConnection(
      socket,
      { ownType: this.ownType, peerTypes: this.peerTypes, maxFrameBytes: this.settings.maxFrameBytes, skipOversized: true },
      {
        ready: (c) => {
          clearTimeout(handshake);
          wasReady = true;
          this.connections++;
          this.delay = this.settings.reconnectMs;
          this.startHeartbeat(c);
          this.onReady(c);
          this.events.connected?.();
        },
        message: (_c, frames, oversized) => this.events.message(frames, oversized),
      },
    );
    this.connection = connection;
    socket.on("close", () => {
      clearTimeout(handshake);
      if (this.connection !== connection) return;
      this.connection = null;
      this.stopHeartbeat();
      if (wasReady) this.events.disconnected?.();
      if (this.closed) return;
      this.redial = setTimeout(() => this.dial(), this.delay);
      this.delay = Math.min(this.settings.maxReconnectMs, this.delay * 2);
    });
  }

  private startHeartbeat(connection: ZmtpConnection): void {
    const every = this.settings.heartbeatMs;
    // ZMTP 3.0 has no PING.
    if (every <= 0 || connection.peerMinor < 1) return;
    this.heartbeat = setInterval(() => {
      if (Date.now() - connection.lastReceivedAt > 3 * every) connection.socket.destroy();
      else connection.socket.write(pingCommand());
    }, every);
    this.heartbeat.unref?.();
  }

  private stopHeartbeat(): void {
    if (this.heartbeat !== null) clearInterval(this.heartbeat);
    this.heartbeat = null;
  }
}

/** A SUB socket: subscribes to `topics` (prefixes of a message's first frame; "" is everything) on every connection. */
export class SubSocket extends ConnectingSocket {
  constructor(
    endpoint: TcpEndpoint & { host: string },
    private readonly topics: readonly Uint8Array[],
    events: ConnectingSocketEvents,
    options: ConnectingSocketOptions = {},
  ) {
    super(endpoint, "SUB", ["PUB", "XPUB"], events, options);
  }

  protected override onReady(connection: ZmtpConnection): void {
    for (const topic of this.topics) connection.send(subscription(topic, connection.peerMinor));
  }
}

/** A DEALER socket (one peer: the endpoint it connects to). */
export class DealerSocket extends ConnectingSocket {
  constructor(endpoint: TcpEndpoint & { host: string }, events: ConnectingSocketEvents, options: ConnectingSocketOptions = {}) {
    super(endpoint, "DEALER", ["ROUTER", "DEALER"], events, options);
  }

  send(frames: readonly Uint8Array[]): boolean {
    return this.sendFrames(frames);
  }
}
