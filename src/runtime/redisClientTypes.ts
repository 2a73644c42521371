/** The redisClient adapter's contract: what both runtimes' implementations provide. */
export interface RedisConnection {
  readonly connected: boolean;
  connect(): Promise<void>;
  close(): void;
  onclose?: ((error: Error) => void) | null;
  send(command: string, args: (string | Uint8Array)[]): Promise<unknown>;
  getBuffer(key: string): Promise<Uint8Array | null>;
}

export interface RedisConnectionOptions {
  /** Milliseconds to connect. */
  connectionTimeout: number;
  /** rediss://: true, or the CA certificate (PEM) to trust. */
  tls?: boolean | { ca: string };
}
