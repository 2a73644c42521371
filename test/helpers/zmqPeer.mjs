// A libzmq peer for the KV events tests, run by Node (the zeromq addon does not load under Bun):
// `node zmqPeer.mjs ENDPOINT [TOPIC]` subscribes a SUB socket to ENDPOINT and prints every
// message it gets as a JSON line {"kind":"message","frames":[hex, …]}. Each JSON line read from
// stdin, {"replay": ENDPOINT, "start": N, "socket": "dealer"|"req"}, sends a replay request from a
// fresh DEALER (one frame: start as 8 big-endian bytes) or REQ socket and prints the answers,
// {"kind":"replay","frames":[…]} each, until the one whose sequence number is -1.
import { createInterface } from "node:readline";
import * as zmq from "zeromq";

const [endpoint, topic = ""] = process.argv.slice(2);
const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);
const hex = (frames) => frames.map((frame) => Buffer.from(frame).toString("hex"));

const sub = new zmq.Subscriber();
sub.connect(endpoint);
sub.subscribe(topic);
print({ kind: "started", zmq: zmq.version });

(async () => {
  for await (const frames of sub) print({ kind: "message", frames: hex(frames) });
})();

async function replay({ replay: at, start, socket }) {
  const peer = socket === "req" ? new zmq.Request() : new zmq.Dealer();
  peer.connect(at);
  const seq = Buffer.alloc(8);
  seq.writeBigInt64BE(BigInt(start));
  await peer.send(seq);
  for (;;) {
    const frames = await peer.receive();
    print({ kind: "replay", frames: hex(frames) });
    if (socket === "req" || frames[frames.length - 2]?.equals(Buffer.alloc(8, 0xff))) break;
  }
  peer.close();
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  replay(JSON.parse(line)).catch((error) => print({ kind: "error", message: String(error) }));
});
lines.on("close", () => {
  sub.close();
  process.exit(0);
});
