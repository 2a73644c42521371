/**
 * fetch with a choice of decoding the answer (Bun's `decompress` option). Bun's fetch decodes
 * gzip, x-gzip, deflate, br and zstd when asked, and hands over the bytes as encoded otherwise.
 * Deno's fetch cannot be told either: its twin always asks the upstream for identity (so a
 * passthrough answer comes uncompressed, where Bun relays the client's Accept-Encoding) and
 * decodes gzip, x-gzip and deflate itself with DecompressionStream; an answer in another coding
 * stays encoded, which the proxy then treats as undecodable (answerDecoding.ts).
 */
import { bunFetch, BUN_FETCH_DECODES } from "./bun/httpClient.ts";
import { denoFetch, DENO_FETCH_DECODES } from "./deno/httpClient.ts";
import { runtimeName } from "./runtimeName.ts";

/** fetch; with `decompress`, the answer's body decoded (and its Content-Encoding gone) when its coding is one of fetchDecodes. */
export const fetchWithDecompress: (url: string, init: RequestInit, decompress: boolean) => Promise<Response> = runtimeName === "bun" ? bunFetch : denoFetch;

/** The Content-Encodings (lower case) that fetchWithDecompress decodes. */
export const fetchDecodes: ReadonlySet<string> = runtimeName === "bun" ? BUN_FETCH_DECODES : DENO_FETCH_DECODES;
