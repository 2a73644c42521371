/**
 * Runs zmqPeer.mjs under Node: a real libzmq SUB socket (and DEALER/REQ replay clients) talking
 * to ctxr's own ZMTP sockets, so the tests check the wire against libzmq, not against ctxr's
 * own reading of it.
 */
import { join } from "node:path";
import { REPO_ROOT } from "./cli.ts";

export interface ZmqPeerLine {
  kind: "started" | "message" | "replay" | "error";
  frames?: Uint8Array[];
  message?: string;
}

export class ZmqPeer {
  private readonly lines: ZmqPeerLine[] = [];
  private waiter: (() => void) | null = null;
  private constructor(private readonly process: ReturnType<typeof Bun.spawn<"pipe", "pipe", "pipe">>) {}

  /** A SUB socket connected to `endpoint`, subscribed to `topic`. */
  static async subscribe(endpoint: string, topic = ""): Promise<ZmqPeer> {
    const child = Bun.spawn(["node", join(REPO_ROOT, "test/helpers/zmqPeer.mjs"), endpoint, topic], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
    const peer = new ZmqPeer(child);
    void peer.read();
    const started = await peer.next("started", 20_000);
    if (started === null) throw new Error(`zmqPeer.mjs did not start: ${await new Response(child.stderr).text()}`);
    return peer;
  }

  private async read(): Promise<void> {
    let rest = "";
    for await (const chunk of this.process.stdout) {
      rest += new TextDecoder().decode(chunk);
      const parts = rest.split("\n");
      rest = parts.pop()!;
      for (const part of parts) {
        const raw = JSON.parse(part) as { kind: ZmqPeerLine["kind"]; frames?: string[]; message?: string };
        this.lines.push({ ...raw, frames: raw.frames?.map((hex) => Uint8Array.from(Buffer.from(hex, "hex"))) });
        this.waiter?.();
      }
    }
  }

  /** The next line of `kind` (earlier lines of other kinds stay), or null after `timeoutMs`. */
  async next(kind: ZmqPeerLine["kind"], timeoutMs = 10_000): Promise<ZmqPeerLine | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const at = this.lines.findIndex((line) => line.kind === kind || line.kind === "error");
      if (at >= 0) {
        const [line] = this.lines.splice(at, 1);
        if (line!.kind === "error") throw new Error(`zmqPeer.mjs: ${line!.message}`);
        return line!;
      }
      const left = deadline - Date.now();
      if (left <= 0) return null;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.waiter = null;
    }
  }

  /** The next `count` lines of `kind`; throws when they do not all come within `timeoutMs`. */
  async take(kind: "message" | "replay", count: number, timeoutMs = 20_000): Promise<Uint8Array[][]> {
    const deadline = Date.now() + timeoutMs;
    const out: Uint8Array[][] = [];
    while (out.length < count) {
      const line = await this.next(kind, Math.max(0, deadline - Date.now()));
      if (line === null) throw new Error(`zmqPeer.mjs: ${out.length} of ${count} ${kind} lines within ${timeoutMs} ms`);
      out.push(line.frames!);
    }
    return out;
  }

  /** Messages received within `quietMs` of each other (stops at the first silence). */
  async drain(kind: "message" | "replay", quietMs = 300): Promise<Uint8Array[][]> {
    const out: Uint8Array[][] = [];
    for (;;) {
      const line = await this.next(kind, quietMs);
      if (line === null) return out;
      out.push(line.frames!);
    }
  }

  /** Sends a replay request for batches from `start` from a fresh DEALER (or REQ) socket. */
  requestReplay(endpoint: string, start: number, socket: "dealer" | "req" = "dealer"): void {
    this.process.stdin.write(`${JSON.stringify({ replay: endpoint, start, socket })}\n`);
    this.process.stdin.flush();
  }

  async close(): Promise<void> {
    this.process.stdin.end();
    const exited = await Promise.race([this.process.exited, Bun.sleep(5000).then(() => null)]);
    if (exited === null) this.process.kill();
  }
}
