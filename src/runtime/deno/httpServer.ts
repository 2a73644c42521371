import type { HttpServeOptions, HttpServer } from "../httpServerTypes.ts";
import { deno, type DenoHttpServer } from "./denoApi.ts";

/** Deno's bind errors by class name, as the errno names Bun's carry in `code`. */
const ERRNO_NAMES: Record<string, string> = { AddrInUse: "EADDRINUSE", AddrNotAvailable: "EADDRNOTAVAIL", PermissionDenied: "EACCES" };

/** After a forced stop, how long to wait for the graceful one before letting the process go. */
const FORCED_STOP_WAIT_MS = 1_000;

export function denoServeHttp(options: HttpServeOptions): HttpServer {
  let server: DenoHttpServer;
  try {
    server = deno().serve({
      hostname: options.hostname,
      port: options.port,
      reusePort: false,
      // Deno prints "Listening on ..." unless told otherwise; the caller says where it listens.
      onListen: () => {},
      onError: (error) => options.error(error instanceof Error ? error : new Error(String(error))),
      handler: (request) => options.fetch(request, () => {}),
    });
  } catch (error) {
    const code = ERRNO_NAMES[(error as Error).name];
    if (code !== undefined && (error as NodeJS.ErrnoException).code === undefined) Object.assign(error as Error, { code });
    throw error;
  }
  let shutdown: Promise<void> | null = null;
  return {
    port: server.addr.port,
    async stop(closeActive) {
      shutdown ??= server.shutdown();
      if (!closeActive) return shutdown;
      // Deno has no forced close: streams still open after a short wait no longer hold the process.
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([shutdown, new Promise<void>((resolve) => (timer = setTimeout(resolve, FORCED_STOP_WAIT_MS)))]);
      clearTimeout(timer);
      server.unref();
    },
  };
}
