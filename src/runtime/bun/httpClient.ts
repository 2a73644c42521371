/** Measured on Bun 1.4: a single coding among these, case-insensitively (a list such as "gzip, br" stays encoded). */
export const BUN_FETCH_DECODES: ReadonlySet<string> = new Set(["identity", "gzip", "x-gzip", "deflate", "br", "zstd"]);

export function bunFetch(url: string, init: RequestInit, decompress: boolean): Promise<Response> {
  return fetch(url, { ...init, decompress } as RequestInit);
}
