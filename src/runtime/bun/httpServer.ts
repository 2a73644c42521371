import type { HttpServeOptions, HttpServer } from "../httpServerTypes.ts";

export function bunServeHttp(options: HttpServeOptions): HttpServer {
  const server = Bun.serve({
    hostname: options.hostname,
    port: options.port,
    // The app answers oversized bodies itself with a JSON 413: Hono's bodyLimit on the JSON routes, the proxy's
    // readBody on proxied ones (both refuse a too-large Content-Length unread and stop reading a chunked body at
    // the limit). Bun's own cap answers a bare 413 with no body and cannot be hooked, so it is set out of reach;
    // a route that reads a body must bound it itself.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    development: false,
    // Never share the port with another process (Bun may otherwise set SO_REUSEPORT).
    reusePort: false,
    idleTimeout: options.idleTimeoutS,
    fetch: (request, bunServer) => options.fetch(request, (seconds) => bunServer.timeout(request, seconds)),
    error: options.error,
  });
  return {
    port: server.port!,
    stop: (closeActive) => server.stop(closeActive),
  };
}
