export const DENO_FETCH_DECODES: ReadonlySet<string> = new Set(["identity", "gzip", "x-gzip", "deflate"]);

const DECODERS: Record<string, "gzip" | "deflate"> = { gzip: "gzip", "x-gzip": "gzip", deflate: "deflate" };

/**
 * Deno's fetch decodes gzip and br answers unless the request asked for identity, and leaves
 * their Content-Encoding in place, so a relayed answer would say gzip over decoded bytes. Asking
 * for identity keeps the bytes and their header together; what must be read is decoded here.
 */
export async function denoFetch(url: string, init: RequestInit, decompress: boolean): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set("accept-encoding", "identity");
  const response = await fetch(url, { ...init, headers });
  const format = DECODERS[(response.headers.get("content-encoding") ?? "").trim().toLowerCase()];
  if (!decompress || format === undefined || response.body === null) return response;
  const decodedHeaders = new Headers(response.headers);
  decodedHeaders.delete("content-encoding");
  decodedHeaders.delete("content-length");
  return new Response(response.body.pipeThrough(new DecompressionStream(format)), { status: response.status, statusText: response.statusText, headers: decodedHeaders });
}
