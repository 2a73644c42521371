/**
 * Serving HTTP: a fetch handler (web-standard Request → Response) on a host and port. Bun.serve
 * on Bun, Deno.serve on Deno. Bind failures throw an error whose `code` is the errno name
 * (EADDRINUSE, EADDRNOTAVAIL, EACCES) on both.
 */
import { bunServeHttp } from "./bun/httpServer.ts";
import { denoServeHttp } from "./deno/httpServer.ts";
import { runtimeName } from "./runtimeName.ts";
import type { HttpServeOptions, HttpServer } from "./httpServerTypes.ts";
export type { HttpServeOptions, HttpServer } from "./httpServerTypes.ts";

export const serveHttp: (options: HttpServeOptions) => HttpServer = runtimeName === "bun" ? bunServeHttp : denoServeHttp;
