/**
 * ctxr's SUB and DEALER sockets that connect: against libzmq (a Node child, zmqPublisherPeer.mjs:
 * an XPUB and a ROUTER answering as vLLM's publisher does), and against ctxr's own PUB and hand
 * driven servers for reconnects, a publisher that starts late, oversized frames, a peer that goes
 * silent and one that never greets.
 */
import { describe, expect, setDefaultTimeout, test } from "bun:test";
import { cleanupAfterEach, until } from "../helpers/testLifecycle.ts";
import { createServer, type Server, type Socket } from "node:net";
import { parseConnectEndpoint } from "../../src/zmq/tcpEndpoint.ts";
import { DealerSocket, SubSocket } from "../../src/zmq/zmqConnectingSockets.ts";
import { PubSocket } from "../../src/zmq/zmqSockets.ts";
import { encodeMetadata, encodeCommand, greeting } from "../../src/zmq/zmtp.ts";
import { freeTcpPort } from "../helpers/freeTcpPort.ts";
import { ZmqPeer } from "../helpers/zmqPeer.ts";

setDefaultTimeout(30_000);

const text = (value: string) => new TextEncoder().encode(value);
const str = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
const cleanup = cleanupAfterEach();

interface Received {
  frames: string[];
  oversized: boolean;
}

function subscriber(endpoint: string, topics: string[], options: ConstructorParameters<typeof SubSocket>[3] = {}) {
  const received: Received[] = [];
  const events: string[] = [];
  const sub = new SubSocket(
    parseConnectEndpoint(endpoint),
    topics.map(text),
    { message: (frames, oversized) => received.push({ frames: frames.map(str), oversized }), connected: () => events.push("connected"), disconnected: () => events.push("disconnected") },
    { reconnectMs: 20, maxReconnectMs: 100, ...options },
  );
  sub.start();
  cleanup(() => sub.close());
  return { sub, received, events };
}

/** A TCP server whose connections read (and drop) what comes, and are cut at cleanup. */
async function listen(onSocket: (socket: Socket) => void): Promise<{ server: Server; port: number }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.resume();
    onSocket(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanup(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { server, port: (server.address() as { port: number }).port };
}

describe("SubSocket", () => {
  test("against libzmq's XPUB: subscribes to its prefixes and gets exactly the matching messages, a 1 MiB frame intact", async () => {
    const libzmq = await ZmqPeer.publisher();
    cleanup(() => libzmq.close());
    const { received } = subscriber(libzmq.started!.pub!, ["kv", "other"]);
    const subscriptions = await libzmq.take("subscribed", 2);
    expect(subscriptions.map((frames) => str(frames[0]!)).sort()).toEqual(["\u0001kv", "\u0001other"]);
    const big = "y".repeat(1 << 20);
    libzmq.sendFrames([text("kv-events"), text("a"), text(big)]);
    libzmq.sendFrames([text("ignored"), text("b")]);
    libzmq.sendFrames([text("other"), text("c")]);
    await until(() => received.length === 2, "two messages");
    expect(received[0]!.frames).toEqual(["kv-events", "a", big]);
    expect(received[1]).toEqual({ frames: ["other", "c"], oversized: false });
  });

  test("a frame over the limit arrives empty and marked; the connection stays and the next message is whole", async () => {
    const libzmq = await ZmqPeer.publisher();
    cleanup(() => libzmq.close());
    const { received, events } = subscriber(libzmq.started!.pub!, [""], { maxFrameBytes: 1000 });
    await libzmq.take("subscribed", 1);
    libzmq.sendFrames([text("t"), text("x".repeat(5000)), text("after")]);
    libzmq.sendFrames([text("t"), text("fine")]);
    await until(() => received.length === 2, "two messages");
    expect(received).toEqual([
      { frames: ["t", "", "after"], oversized: true },
      { frames: ["t", "fine"], oversized: false },
    ]);
    expect(events).toEqual(["connected"]);
  });

  test("dials until the publisher is there, and again after it goes away and comes back", async () => {
    const port = await freeTcpPort();
    const endpoint = { host: "127.0.0.1", port };
    const { sub, received, events } = subscriber(`tcp://127.0.0.1:${port}`, [""]);
    await Bun.sleep(150);
    expect(sub.connected).toBe(false);
    let pub = await PubSocket.bind(endpoint);
    await until(() => pub.subscribers === 1, "the first subscription");
    pub.send([text(""), text("one")]);
    await until(() => received.length === 1, "the first message");
    await pub.close();
    await until(() => events.length === 2, "the disconnect");
    pub = await PubSocket.bind(endpoint);
    cleanup(() => pub.close());
    await until(() => pub.subscribers === 1, "the subscription again");
    pub.send([text(""), text("two")]);
    await until(() => received.length === 2, "the second message");
    expect(events).toEqual(["connected", "disconnected", "connected"]);
    expect(sub.connections).toBe(2);
  });

  test("a peer that goes silent (no PONG) is dropped after three heartbeats and dialled again", async () => {
    let accepted = 0;
    const { port } = await listen((socket) => {
      accepted++;
      // Greets and says READY as a PUB, then reads nothing and answers nothing.
      socket.write(greeting());
      socket.write(encodeCommand("READY", encodeMetadata({ "Socket-Type": text("PUB") })));
    });
    const { events } = subscriber(`tcp://127.0.0.1:${port}`, [""], { heartbeatMs: 40 });
    await until(() => accepted >= 2, "a second connection", 5000);
    expect(events.slice(0, 2)).toEqual(["connected", "disconnected"]);
  });

  test("a peer that never finishes the handshake is dropped and dialled again", async () => {
    let accepted = 0;
    const { port } = await listen(() => accepted++);
    const { events } = subscriber(`tcp://127.0.0.1:${port}`, [""], { handshakeTimeoutMs: 50 });
    await until(() => accepted >= 3, "three connections", 5000);
    expect(events).toEqual([]);
  });
});

describe("DealerSocket", () => {
  test("asks libzmq's ROUTER for a replay in vLLM's framing ([empty, start]) and gets [empty, seq, payload] answers, then seq -1", async () => {
    const libzmq = await ZmqPeer.publisher();
    cleanup(() => libzmq.close());
    for (const payload of ["p0", "p1", "p2"]) libzmq.publish(text(payload));
    await libzmq.take("kept", 3);
    const answers: Uint8Array[][] = [];
    const dealer = new DealerSocket(parseConnectEndpoint(libzmq.started!.replay!), { message: (frames) => answers.push(frames) });
    dealer.start();
    cleanup(() => dealer.close());
    await until(() => dealer.connected, "the connection");
    const start = new Uint8Array(8);
    start[7] = 1;
    expect(dealer.send([new Uint8Array(0), start])).toBe(true);
    await until(() => answers.length === 3, "three answers");
    const request = await libzmq.next("request");
    expect(request!.frames!.map((f) => Array.from(f))).toEqual([[], [0, 0, 0, 0, 0, 0, 0, 1]]);
    expect(answers.map((frames) => frames.map((f) => Buffer.from(f).toString("hex")))).toEqual([
      ["", "0000000000000001", Buffer.from("p1").toString("hex")],
      ["", "0000000000000002", Buffer.from("p2").toString("hex")],
      ["", "ffffffffffffffff", ""],
    ]);
  });

  test("a send before the connection is refused (false), not queued", () => {
    const dealer = new DealerSocket(parseConnectEndpoint("tcp://127.0.0.1:9"), { message: () => {} });
    cleanup(() => dealer.close());
    expect(dealer.send([text("x")])).toBe(false);
  });
});
