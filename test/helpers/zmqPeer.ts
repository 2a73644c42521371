/**
 * Runs zmqPeer.mjs under Node: a real libzmq SUB socket (and DEALER/REQ replay clients) talking
 * to ctxr's own ZMTP sockets, or zmqPublisherPeer.mjs: a libzmq PUB and ROUTER publishing and
 * replaying as vLLM does, for ctxr's SUB and DEALER. The tests check the wire against libzmq,
 * not against ctxr's own reading of it.
 */
import { join } from "node:path";
import { REPO_ROOT } from "./cli.ts";
import { sleep } from "../../src/runtime/sleep.ts";
import { spawnPiped, type PipedChild } from "../../src/runtime/childProcess.ts";

export interface ZmqPeerLine {
  kind: "started" | "message" | "replay" | "subscribed" | "request" | "kept" | "error";
  frames?: Uint8Array[];
  message?: string;
  /** zmqPublisherPeer.mjs's bound endpoints. */
  pub?: string;
  replay?: string;
}

export class ZmqPeer {
  private readonly lines: ZmqPeerLine[] = [];
  private waiter: (() => void) | null = null;
  private constructor(private readonly process: PipedChild) {}

  /** The started line of zmqPublisherPeer.mjs (its endpoints). */
  started: ZmqPeerLine | null = null;

  /** A SUB socket connected to `endpoint`, subscribed to `topic`. */
  static subscribe(endpoint: string, topic = ""): Promise<ZmqPeer> {
    return ZmqPeer.spawn("zmqPeer.mjs", [endpoint, topic]);
  }

  /** A libzmq XPUB and ROUTER bound on 127.0.0.1 (`started.pub`, `started.replay`), replaying as vLLM does. */
  static publisher(): Promise<ZmqPeer> {
    return ZmqPeer.spawn("zmqPublisherPeer.mjs", []);
  }

  private static async spawn(script: string, args: string[]): Promise<ZmqPeer> {
    const child = spawnPiped(["node", join(REPO_ROOT, "test/helpers", script), ...args], { env: process.env });
    const peer = new ZmqPeer(child);
    void peer.read();
    peer.started = await peer.next("started", 20_000);
    if (peer.started === null) throw new Error(`${script} did not start: ${await new Response(child.stderr).text()}`);
    return peer;
  }

  private async read(): Promise<void> {
    let rest = "";
    for await (const chunk of this.process.stdout) {
      rest += new TextDecoder().decode(chunk);
      const parts = rest.split("\n");
      rest = parts.pop()!;
      for (const part of parts) {
        const raw = JSON.parse(part) as Omit<ZmqPeerLine, "frames"> & { frames?: string[] };
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
  async take(kind: "message" | "replay" | "subscribed" | "request" | "kept", count: number, timeoutMs = 20_000): Promise<Uint8Array[][]> {
    const deadline = Date.now() + timeoutMs;
    const out: Uint8Array[][] = [];
    while (out.length < count) {
      const line = await this.next(kind, Math.max(0, deadline - Date.now()));
      if (line === null) throw new Error(`zmqPeer.mjs: ${out.length} of ${count} ${kind} lines within ${timeoutMs} ms`);
      out.push(line.frames ?? []);
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
    this.write({ replay: endpoint, start, socket });
  }

  /**
   * zmqPublisherPeer.mjs: publishes `payload` under the next sequence number, kept for replay
   * (`send` false: lost on the way). A "kept" line says when a replay would include it.
   */
  publish(payload: Uint8Array, topic = "", send = true): void {
    this.write({ publish: Buffer.from(payload).toString("hex"), topic: Buffer.from(topic).toString("hex"), send });
  }

  /** zmqPublisherPeer.mjs: sends these frames as they are. */
  sendFrames(frames: readonly Uint8Array[]): void {
    this.write({ frames: frames.map((frame) => Buffer.from(frame).toString("hex")) });
  }

  private write(command: unknown): void {
    this.process.stdin.write(new TextEncoder().encode(`${JSON.stringify(command)}\n`));
    this.process.stdin.flush();
  }

  async close(): Promise<void> {
    this.process.stdin.end();
    const exited = await Promise.race([this.process.exited, sleep(5000).then(() => null)]);
    if (exited === null) this.process.kill();
  }
}
