/** A test's own HTTP server (a fake engine or upstream) on the runtime's server, port 0 by default. */
import { serveHttp, type HttpServer } from "../../src/runtime/httpServer.ts";

export function serveForTest(fetch: (request: Request) => Response | Promise<Response>, options: { port?: number; idleTimeoutS?: number } = {}): HttpServer {
  return serveHttp({
    hostname: "127.0.0.1",
    port: options.port ?? 0,
    // Bun's default unless the test says otherwise (0: none).
    idleTimeoutS: options.idleTimeoutS ?? 10,
    fetch: (request) => fetch(request),
    error: (error) => new Response(`test server: ${error.message}`, { status: 500 }),
  });
}
