/** `tcp://HOST:PORT` endpoints, the only transport ctxr's ZeroMQ sockets speak. */

/** A `tcp://HOST:PORT` endpoint: HOST `*` binds every interface; PORT 0 picks a free port. */
export interface TcpEndpoint {
  host: string | null;
  port: number;
}

export function parseTcpEndpoint(value: string): TcpEndpoint {
  const match = /^tcp:\/\/(\*|\[[0-9a-fA-F:.]+\]|[^:/[\]\s]+):(\d{1,5})$/.exec(value);
  if (match === null) throw new RangeError(`'${value}' is not a tcp://HOST:PORT endpoint`);
  const port = Number(match[2]);
  if (port > 65535) throw new RangeError(`'${value}': port ${port} is over 65535`);
  const host = match[1]!;
  return { host: host === "*" ? null : host.replace(/^\[(.*)\]$/, "$1"), port };
}

export function formatTcpEndpoint(host: string | null, port: number): string {
  const shown = host === null ? "*" : host.includes(":") ? `[${host}]` : host;
  return `tcp://${shown}:${port}`;
}

/** An endpoint to connect to: a host (not `*`) and a port (not 0). */
export function parseConnectEndpoint(value: string): TcpEndpoint & { host: string } {
  const endpoint = parseTcpEndpoint(value);
  if (endpoint.host === null) throw new RangeError(`'${value}': a socket that connects needs a host, not *`);
  if (endpoint.port === 0) throw new RangeError(`'${value}': a socket that connects needs a port, not 0`);
  return endpoint as TcpEndpoint & { host: string };
}

/**
 * `ENDPOINT[,key=value]…` (the form of --kv-events-publish and --kv-events): the endpoint and
 * the settings by key; RangeError for a key not in `keys` or given twice.
 */
export function splitEndpointSettings(value: string, keys: readonly string[]): { endpoint: string; settings: Map<string, string> } {
  const [endpoint = "", ...rest] = value.split(",");
  const settings = new Map<string, string>();
  for (const part of rest) {
    const at = part.indexOf("=");
    const key = at < 0 ? part.trim() : part.slice(0, at).trim();
    if (!keys.includes(key)) throw new RangeError(`unknown setting '${part.trim()}' (expected ${keys.map((k) => `${k}=`).join(", ").replace(/, ([^,]*)$/, " or $1")})`);
    if (settings.has(key)) throw new RangeError(`${key}= is given twice`);
    settings.set(key, at < 0 ? "" : part.slice(at + 1).trim());
  }
  return { endpoint: endpoint.trim(), settings };
}
