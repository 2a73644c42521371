/**
 * ctxr's PUB and ROUTER sockets: against libzmq (a Node child, zmqPeer.mjs) for topic filtering,
 * and against a hand-driven ZMTP client for what libzmq does not choose to send (ZMTP 3.0
 * subscriptions, CANCEL, PING, a wrong socket type, not ZMTP at all); endpoints and bind errors.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { cleanupAfterEach, until } from "../helpers/testLifecycle.ts";
import { connect, createServer, type Socket } from "node:net";
import { parseTcpEndpoint } from "../../src/zmq/tcpEndpoint.ts";
import { PubSocket, RouterSocket } from "../../src/zmq/zmqSockets.ts";
import { FrameReader, encodeCommand, encodeFrame, encodeMetadata, greeting, parseCommand, type Frame } from "../../src/zmq/zmtp.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";

setDefaultTimeout(30_000);

const LOCAL = { host: "127.0.0.1", port: 0 };
const text = (value: string) => new TextEncoder().encode(value);
const cleanup = cleanupAfterEach();

/** A ZMTP client driven by hand: greeting, READY as `socketType`, then raw frames. */
class RawClient {
  readonly frames: Frame[] = [];
  private readonly reader = new FrameReader(1 << 20);
  private greeted = 0;
  closed = false;

  private constructor(readonly socket: Socket) {
    socket.on("data", (chunk: Buffer) => {
      let data: Uint8Array = chunk;
      if (this.greeted < 64) {
        const take = Math.min(64 - this.greeted, data.length);
        this.greeted += take;
        data = data.subarray(take);
      }
      this.frames.push(...this.reader.push(data));
    });
    socket.on("close", () => (this.closed = true));
    socket.on("error", () => {});
  }

  static async open(port: number, socketType: string, properties: Record<string, Uint8Array> = {}): Promise<RawClient> {
    const socket = connect({ host: "127.0.0.1", port });
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    const client = new RawClient(socket);
    socket.write(greeting());
    socket.write(encodeCommand("READY", encodeMetadata({ "Socket-Type": text(socketType), ...properties })));
    cleanup(() => void socket.destroy());
    await until(() => client.frames.length > 0 || client.closed, "the server's READY");
    return client;
  }

  /** Data frames received after the handshake, as strings. */
  messages(): string[] {
    return this.frames.filter((f) => !f.command).map((f) => new TextDecoder().decode(f.body));
  }
}

async function boundPub(): Promise<PubSocket> {
  const pub = await PubSocket.bind(LOCAL);
  cleanup(() => pub.close());
  return pub;
}

describe("PubSocket", () => {
  test("libzmq SUB peers get the messages whose first frame starts with their subscription", async () => {
    const pub = await boundPub();
    const all = await ZmqPeer.subscribe(pub.endpoint(LOCAL), "");
    cleanup(() => all.close());
    const kv = await ZmqPeer.subscribe(pub.endpoint(LOCAL), "kv");
    cleanup(() => kv.close());
    await until(() => pub.subscribers === 2, "two subscribers");
    for (const topic of ["", "kv", "kv-events", "k", "other"]) pub.send([text(topic), text(`to ${topic}`)]);
    const got = async (peer: ZmqPeer) => (await peer.drain("message")).map((frames) => new TextDecoder().decode(frames[1]));
    expect(await got(all)).toEqual(["to ", "to kv", "to kv-events", "to k", "to other"]);
    expect(await got(kv)).toEqual(["to kv", "to kv-events"]);
  });

  test("ZMTP 3.0 subscription messages, SUBSCRIBE and CANCEL commands, PING answered with PONG", async () => {
    const pub = await boundPub();
    const client = await RawClient.open(pub.port, "SUB");
    expect(parseCommand(client.frames[0]!.body).name).toBe("READY");
    // ZMTP 3.0: a message of 1 (subscribe) then the prefix.
    client.socket.write(encodeFrame(Uint8Array.of(1, ...text("a")), false));
    client.socket.write(encodeCommand("SUBSCRIBE", text("b")));
    await until(() => pub.subscribers === 1, "the subscription");
    pub.send([text("apple"), text("1")]);
    pub.send([text("banana"), text("2")]);
    pub.send([text("cherry"), text("3")]);
    await until(() => client.messages().length === 4, "two messages");
    expect(client.messages()).toEqual(["apple", "1", "banana", "2"]);
    // Cancel both ways; the second subscription to "a" keeps one alive.
    client.socket.write(encodeFrame(Uint8Array.of(1, ...text("a")), false));
    client.socket.write(encodeFrame(Uint8Array.of(0, ...text("a")), false));
    client.socket.write(encodeCommand("CANCEL", text("b")));
    client.socket.write(encodeCommand("PING", Uint8Array.of(0, 50, ...text("ctx"))));
    await until(() => client.frames.some((f) => f.command && parseCommand(f.body).name === "PONG"), "PONG");
    expect(parseCommand(client.frames.find((f) => f.command && parseCommand(f.body).name === "PONG")!.body).data).toEqual(text("ctx"));
    pub.send([text("banana"), text("4")]);
    pub.send([text("apple"), text("5")]);
    await until(() => client.messages().length === 6, "one more message");
    expect(client.messages().slice(4)).toEqual(["apple", "5"]);
    client.socket.write(encodeFrame(Uint8Array.of(0, ...text("a")), false));
    await until(() => pub.subscribers === 0, "no subscription left");
  });

  test("a peer of the wrong type, or not speaking ZMTP, is disconnected", async () => {
    const pub = await boundPub();
    const wrong = await RawClient.open(pub.port, "PUB");
    await until(() => wrong.closed, "the PUB peer to be dropped");
    const http = connect({ host: "127.0.0.1", port: pub.port });
    let closed = false;
    http.on("close", () => (closed = true));
    http.resume();
    http.on("error", () => {});
    http.write("GET / HTTP/1.1\r\n\r\n");
    await until(() => closed, "the HTTP client to be dropped");
    expect(pub.connected).toBe(0);
  });
});

describe("RouterSocket", () => {
  test("messages arrive with the peer's identity (announced or generated) and answers go back to it", async () => {
    const got: [string, string[]][] = [];
    const router = await RouterSocket.bind(LOCAL, (identity, frames) => got.push([Buffer.from(identity).toString("hex"), frames.map((f) => new TextDecoder().decode(f))]));
    cleanup(() => router.close());
    const named = await RawClient.open(router.port, "DEALER", { Identity: text("me") });
    const anonymous = await RawClient.open(router.port, "REQ");
    named.socket.write(Buffer.concat([encodeFrame(text("x"), true), encodeFrame(text("y"), false)]));
    anonymous.socket.write(Buffer.concat([encodeFrame(new Uint8Array(0), true), encodeFrame(text("z"), false)]));
    await until(() => got.length === 2, "two messages");
    const byName = new Map(got);
    expect(byName.get(Buffer.from("me").toString("hex"))).toEqual(["x", "y"]);
    const generated = [...byName.keys()].find((id) => id !== Buffer.from("me").toString("hex"))!;
    expect(generated).toMatch(/^00[0-9a-f]{8}$/);
    expect(byName.get(generated)).toEqual(["", "z"]);
    expect(router.send(text("me"), [text("answer")])).toBe(true);
    expect(router.send(Uint8Array.from(Buffer.from(generated, "hex")), [new Uint8Array(0), text("other")])).toBe(true);
    expect(router.send(text("nobody"), [text("lost")])).toBe(false);
    await until(() => named.messages().length === 1 && anonymous.messages().length === 2, "the answers");
    expect(named.messages()).toEqual(["answer"]);
    expect(anonymous.messages()).toEqual(["", "other"]);
    // A second peer announcing a taken identity is refused.
    const twin = await RawClient.open(router.port, "DEALER", { Identity: text("me") });
    await until(() => twin.closed, "the twin to be dropped");
  });
});

describe("endpoints", () => {
  test("tcp://HOST:PORT with *, IPv4, names and [IPv6]; anything else is refused", () => {
    expect(parseTcpEndpoint("tcp://*:5557")).toEqual({ host: null, port: 5557 });
    expect(parseTcpEndpoint("tcp://127.0.0.1:0")).toEqual({ host: "127.0.0.1", port: 0 });
    expect(parseTcpEndpoint("tcp://localhost:1")).toEqual({ host: "localhost", port: 1 });
    expect(parseTcpEndpoint("tcp://[::1]:5557")).toEqual({ host: "::1", port: 5557 });
    for (const bad of ["", "5557", "tcp://:5557", "tcp://host", "tcp://host:", "udp://host:1", "ipc:///tmp/x", "tcp://host:65536", "tcp://host:5557/x", "tcp://::1:5557"]) {
      expect(() => parseTcpEndpoint(bad)).toThrow(RangeError);
    }
  });

  test("a port in use is an error in words", async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen({ host: "127.0.0.1", port: 0 }, () => resolve()));
    cleanup(() => new Promise<void>((resolve) => taken.close(() => resolve())));
    const port = (taken.address() as { port: number }).port;
    await expect(PubSocket.bind({ host: "127.0.0.1", port })).rejects.toThrow(`cannot bind tcp://127.0.0.1:${port}: the port is in use`);
  });

  test("a bound socket holds at most maxPeers connections and closes those not through the handshake in time; a libzmq SUB then connects", async () => {
    const pub = await PubSocket.bind(LOCAL, { maxPeers: 3, handshakeTimeoutMs: 300 });
    cleanup(() => pub.close());
    let closedByServer = 0;
    const idle: Socket[] = [];
    for (let i = 0; i < 10; i++) {
      const socket = connect({ host: "127.0.0.1", port: pub.port });
      socket.on("error", () => {});
      socket.on("close", () => closedByServer++);
      socket.on("data", () => {});
      idle.push(socket);
      cleanup(() => void socket.destroy());
    }
    await until(() => pub.refusedPeers === 7, "7 connections refused over the cap");
    expect(pub.peerCount).toBe(3);
    // A peer through the handshake is not cut by the deadline; the idle ones are.
    await until(() => pub.handshakeTimeouts === 3 && closedByServer === 10, "the idle connections closed after 300 ms", 5000);
    expect(pub.peerCount).toBe(0);
    const ready = await RawClient.open(pub.port, "SUB");
    await Bun.sleep(500);
    expect(ready.closed).toBe(false);
    expect(pub.handshakeTimeouts).toBe(3);
    const peer = await ZmqPeer.subscribe(`tcp://127.0.0.1:${pub.port}`, "kv");
    cleanup(() => peer.close());
    await until(() => pub.subscribers === 1, "the libzmq subscription");
    pub.send([text("kv"), text("after the flood")]);
    const [message] = await peer.take("message", 1);
    expect(new TextDecoder().decode(message![1]!)).toBe("after the flood");
  });
});
