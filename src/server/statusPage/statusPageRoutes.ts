/**
 * GET / (the status page) and GET /v1/stats/history (the samples its charts draw), in every mode
 * of `ctxr serve`. Thin: the page is built once (statusPageHtml.ts), the samples come from the
 * StatusHistory, which reads /v1/stats' body through statusFigures (the page's one data binding).
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { VERSION } from "../../version.ts";
import { statusFigures } from "./statusFigures.ts";
import type { StatusHistory } from "./statusHistory.ts";
import { STATUS_PAGE_CSP, statusPageHtml } from "./statusPageHtml.ts";

export const STATUS_PAGE_PATHS: readonly [path: string, methods: string[]][] = [
  ["/", ["GET", "HEAD"]],
  ["/v1/stats/history", ["GET", "HEAD"]],
];

export interface StatusPageRouteOptions {
  history: StatusHistory;
  /** The body GET /v1/stats answers. */
  statsBody: () => unknown;
  errorSchema: z.ZodType;
}

const FirstTokenFigures = z.object({ requests: z.int(), seconds: z.number() }).nullable();
const StatusFiguresSchema = z
  .object({
    mode: z.enum(["engine", "proxy", "index"]),
    cached_tokens: z.number().openapi({ description: "Prompt tokens whose KV came from a cache (engine: prefix or chunk cache; proxy: as the upstreams reported; index: estimated prefix hits)." }),
    computed_tokens: z.number().openapi({ description: "Prompt tokens computed (engine: run through the model; proxy: the upstreams' reported prompt tokens less cached; index: reordered less estimated hits)." }),
    ttft_reused: FirstTokenFigures.openapi({ description: "First tokens of requests that reused cached KV, and their summed TTFT in seconds (engine: its own; proxy: streamed answers, Σ upstreams' first_token.reused)." }),
    ttft_not_reused: FirstTokenFigures,
    queue_depth: z.number().nullable().openapi({ description: "Engine: requests waiting for admission; proxy: requests in flight at the upstreams." }),
    running: z.number().nullable(),
    kv_blocks_used: z.number().nullable(),
    kv_blocks_total: z.number().nullable(),
    upstreams: z.array(z.object({ url: z.string(), healthy: z.boolean(), requests: z.number(), in_flight: z.number(), cached_tokens: z.number(), prompt_tokens: z.number() })),
    routing_decisions: z.record(z.string(), z.number()).openapi({ description: "Proxy: choices among several upstreams, by how they were made." }),
  })
  .openapi("StatusFigures");

const StatsHistoryResponse = z
  .object({
    every_ms: z.number().nullable().openapi({ description: "The sampling interval (null: sampled at each request of this route)." }),
    capacity: z.int().openapi({ description: "The most samples kept (the oldest go first)." }),
    samples: z.array(z.object({ time_ms: z.number().openapi({ description: "Milliseconds since the epoch." }), figures: StatusFiguresSchema })).openapi({ description: "Oldest first; counters are totals since start." }),
  })
  .openapi("StatsHistoryResponse");

export function mountStatusPageRoutes(app: OpenAPIHono, options: StatusPageRouteOptions): void {
  options.history.track(() => statusFigures(options.statsBody()));
  let html: string | null = null;

  app.openapi(
    createRoute({
      method: "get",
      path: "/",
      tags: ["operations"],
      summary: "The status page: saved tokens, TTFT, queue, KV blocks and upstreams, drawn from /v1/stats",
      responses: { 200: { description: "An HTML page that needs no network beyond this server.", content: { "text/html": { schema: z.string() } } } },
    }),
    (c) => {
      html ??= statusPageHtml(VERSION);
      return c.html(html, 200, { "Content-Security-Policy": STATUS_PAGE_CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff" });
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/stats/history",
      tags: ["operations"],
      summary: "Recent samples of the status page's figures (what its charts draw)",
      responses: {
        200: { description: "The samples, oldest first.", content: { "application/json": { schema: StatsHistoryResponse } } },
        500: { description: "Internal error.", content: { "application/json": { schema: options.errorSchema } } },
      },
    }),
    (c) => c.json({ every_ms: options.history.everyMs, capacity: options.history.capacity, samples: options.history.current() }, 200),
  );
}
