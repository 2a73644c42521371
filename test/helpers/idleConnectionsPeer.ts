/**
 * A process of its own that opens idle TCP connections (never sending a byte) and notes when the
 * server closed each: the test process may be busy meanwhile, and this one's clock is not.
 *
 *   bun idleConnectionsPeer.ts PORT COUNT DELAY_MS WAIT_MS
 *
 * Prints `ready`, waits DELAY_MS, opens COUNT connections to 127.0.0.1:PORT, then, once every one
 * is closed (or WAIT_MS after opening them), one JSON line: { openedAt, closedAt: [ms since the epoch] }.
 */
import net from "node:net";
import { join } from "node:path";

if (import.meta.main) {
  const [port, count, delayMs, waitMs] = process.argv.slice(2).map(Number) as [number, number, number, number];
  console.log("ready");
  await Bun.sleep(delayMs);
  const openedAt = Date.now();
  const closedAt: number[] = [];
  const sockets = Array.from({ length: count }, () => {
    const socket = net.connect(port, "127.0.0.1");
    socket.on("error", () => {});
    socket.on("data", () => {}); // the server's greeting, read and dropped
    socket.on("close", () => closedAt.push(Date.now()));
    return socket;
  });
  const deadline = openedAt + waitMs;
  while (closedAt.length < count && Date.now() < deadline) await Bun.sleep(5);
  for (const socket of sockets) socket.destroy();
  console.log(JSON.stringify({ openedAt, closedAt }));
  process.exit(0);
}

export interface IdleConnections {
  /** Resolves once the peer has started (its connections open `delayMs` later). */
  ready: Promise<void>;
  /** When the connections were opened and when each was closed by the server (ms since the epoch). */
  result(): Promise<{ openedAt: number; closedAt: number[] }>;
}

/** Starts the peer: `count` idle connections to `port`, `delayMs` after it has started. */
export function idleConnections(port: number, count: number, delayMs: number, waitMs: number): IdleConnections {
  const child = Bun.spawn([process.execPath, join(import.meta.dir, "idleConnectionsPeer.ts"), String(port), String(count), String(delayMs), String(waitMs)], { stdout: "pipe", stderr: "inherit" });
  let started: () => void = () => {};
  const ready = new Promise<void>((resolve) => (started = resolve));
  const output = (async () => {
    let text = "";
    for await (const chunk of child.stdout) {
      text += new TextDecoder().decode(chunk);
      if (text.startsWith("ready\n")) started();
    }
    started();
    return text;
  })();
  return {
    ready,
    async result() {
      const lines = (await output).trim().split("\n");
      return JSON.parse(lines[lines.length - 1]!) as { openedAt: number; closedAt: number[] };
    },
  };
}
