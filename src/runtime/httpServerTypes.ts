/** The httpServer adapter's contract: what both runtimes' implementations provide. */
export interface HttpServeOptions {
  hostname: string;
  /** 0 picks a free port. */
  port: number;
  /** Seconds a connection may write nothing before it is closed (Bun only: Deno has no idle timeout). */
  idleTimeoutS: number;
  /**
   * Answers a request. `setIdleTimeout(seconds)` changes this request's connection idle timeout
   * (0: none); it does nothing on Deno.
   */
  fetch(request: Request, setIdleTimeout: (seconds: number) => void): Response | Promise<Response>;
  /** Answers a request whose fetch threw (or whose body could not be read). */
  error(error: Error): Response;
}

export interface HttpServer {
  /** The bound port. */
  readonly port: number;
  /**
   * Stops accepting connections. `closeActive` false: requests in flight go on (the promise
   * settles when they are done, or when a later call with true closes them); true: open
   * connections are closed now.
   */
  stop(closeActive: boolean): Promise<void>;
}
