/**
 * An upstream's address: `--upstream http[s]://[user:pass@]host[:port][/prefix][?query]`.
 * Credentials in the URL become a Basic Authorization header and are never
 * shown: the display form (stats, logs, metrics) is the URL without them.
 * A prefix ending in /v1 is the API root (OpenAI base-URL style), so
 * `/v1/chat/completions` goes to `<prefix>/chat/completions` and an engine path
 * outside /v1 (`/tokenize`) to the prefix's parent; any other prefix is
 * prepended to the whole path.
 */
export interface UpstreamTarget {
  /** scheme://host[:port][/prefix], without credentials or query: how stats and logs name it. */
  readonly url: string;
  /** scheme://host[:port][/prefix] to which request paths are appended. */
  readonly base: string;
  /** Whether the prefix is an API root ending in /v1. */
  readonly versioned: boolean;
  /** The upstream URL's own query parameters (sent with every request), without "?". */
  readonly query: string;
  /** "Basic …" from credentials in the URL, else null. */
  readonly basicAuthorization: string | null;
  /**
   * Secrets the URL carried, to redact: user and password as written in the
   * URL and percent-decoded, and the base64 Basic credential.
   */
  readonly secrets: string[];
}

/** Parses an --upstream value; the error message never contains credentials. */
export function parseUpstreamUrl(raw: string): UpstreamTarget {
  let parsed: URL;
  try {
    parsed = new URL(raw);
  } catch {
    throw new Error(`not a URL: ${JSON.stringify(raw.replace(/\/\/[^/@]*@/, "//***@"))}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error(`expected an http:// or https:// URL, got ${parsed.protocol}`);
  if (parsed.hash !== "") throw new Error("an upstream URL cannot have a #fragment");
  const user = percentDecoded(parsed.username);
  const password = percentDecoded(parsed.password);
  const credential = user === "" && password === "" ? null : Buffer.from(`${user}:${password}`).toString("base64");
  const basicAuthorization = credential === null ? null : `Basic ${credential}`;
  const path = parsed.pathname.replace(/\/+$/, "");
  const base = `${parsed.protocol}//${parsed.host}${path}`;
  return {
    url: base,
    base,
    versioned: /\/v1$/.test(path),
    query: parsed.search.replace(/^\?/, ""),
    basicAuthorization,
    secrets: [...new Set([parsed.username, user, parsed.password, password, credential ?? ""])].filter((s) => s !== ""),
  };
}

/** A URL component percent-decoded (as written where it is not valid percent-encoding). */
function percentDecoded(component: string): string {
  try {
    return decodeURIComponent(component);
  } catch {
    return component;
  }
}

/** The upstream URL for a request path (starting with /) and query (without "?"). */
export function upstreamRequestUrl(target: UpstreamTarget, path: string, query: string): string {
  const inV1 = path === "/v1" || path.startsWith("/v1/");
  const url = !target.versioned ? target.base + path : inV1 ? target.base + path.slice(3) : target.base.slice(0, -3) + path;
  const search = [target.query, query].filter((q) => q !== "").join("&");
  return `${url}${search === "" ? "" : `?${search}`}`;
}
