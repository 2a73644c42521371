/** `redis://HOST:PORT[/DB]` (and `rediss://` for TLS) as given to --state and --kv-remote. */

export interface RedisUrl {
  host: string;
  port: number;
  db: number;
  tls: boolean;
  /** The URL as Bun's Redis client takes it (credentials kept). */
  url: string;
  /** For logs: the URL without a password. */
  display: string;
}

export function parseRedisUrl(text: string, flag: string): RedisUrl {
  let parsed: URL;
  try {
    parsed = new URL(text);
  } catch {
    throw new Error(`${flag}: ${JSON.stringify(text)} is not a URL; expected redis://HOST:PORT[/DB]`);
  }
  if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") {
    throw new Error(`${flag}: ${JSON.stringify(text)} has scheme ${parsed.protocol.replace(/:$/, "")}; expected redis://HOST:PORT[/DB] (or rediss:// for TLS)`);
  }
  if (parsed.hostname === "") throw new Error(`${flag}: ${JSON.stringify(text)} names no host; expected redis://HOST:PORT[/DB]`);
  const port = parsed.port === "" ? 6379 : Number(parsed.port);
  const path = parsed.pathname.replace(/^\//, "");
  if (path !== "" && !/^\d+$/.test(path)) throw new Error(`${flag}: database ${JSON.stringify(path)} in ${JSON.stringify(text)} is not a number; expected redis://HOST:PORT/DB`);
  const db = path === "" ? 0 : Number(path);
  if (parsed.search !== "" || parsed.hash !== "") throw new Error(`${flag}: ${JSON.stringify(text)} has a query or fragment; expected redis://HOST:PORT[/DB]`);
  const display = parsed.password === "" ? text : text.replace(`:${parsed.password}@`, ":***@");
  return { host: parsed.hostname, port, db, tls: parsed.protocol === "rediss:", url: text, display };
}
