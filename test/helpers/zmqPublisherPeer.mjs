// A libzmq publisher for the KV events subscriber tests, run by Node (the zeromq addon does not
// load under Bun), answering replay requests as vLLM's and SGLang's ZmqEventPublisher does.
// `node zmqPublisherPeer.mjs` binds an XPUB socket (a PUB that reports subscriptions) and a
// ROUTER socket on 127.0.0.1, prints {"kind":"started","pub":ENDPOINT,"replay":ENDPOINT}, then
// {"kind":"subscribed","frames":[hex]} for each subscription and {"kind":"request","frames":[…]}
// for each replay request. Each JSON line read from stdin:
// - {"publish": hex payload, "topic"?: hex, "send"?: false}: sent as [topic, seq (8 bytes, from 0),
//   payload] and kept (with send false: kept only, a message lost on the way), then
//   {"kind":"kept","seq":N} is printed (a replay asked for after that line includes it);
// - {"frames": [hex, …]}: sent as they are.
// A replay request must be [identity, empty, start] (vLLM's check): every kept batch from start
// goes back as [identity, empty, seq, payload], then [identity, empty, -1, empty].
import { createInterface } from "node:readline";
import * as zmq from "zeromq";

const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);
const hex = (frames) => frames.map((frame) => Buffer.from(frame).toString("hex"));
const seqBytes = (seq) => {
  const out = Buffer.alloc(8);
  out.writeBigInt64BE(BigInt(seq));
  return out;
};

const pub = new zmq.XPublisher();
const router = new zmq.Router();
await pub.bind("tcp://127.0.0.1:*");
await router.bind("tcp://127.0.0.1:*");
const kept = [];
print({ kind: "started", pub: pub.lastEndpoint, replay: router.lastEndpoint, zmq: zmq.version });

(async () => {
  for await (const frames of pub) print({ kind: "subscribed", frames: hex(frames) });
})();

(async () => {
  for await (const frames of router) {
    print({ kind: "request", frames: hex(frames.slice(1)) });
    if (frames.length !== 3) continue;
    const [identity, , start] = frames;
    const from = start.readBigInt64BE();
    for (const [seq, payload] of kept) if (BigInt(seq) >= from) await router.send([identity, "", seqBytes(seq), payload]);
    await router.send([identity, "", seqBytes(-1), ""]);
  }
})();

async function run(command) {
  if (command.frames) return pub.send(command.frames.map((frame) => Buffer.from(frame, "hex")));
  const seq = kept.length;
  const payload = Buffer.from(command.publish, "hex");
  kept.push([seq, payload]);
  if (command.send !== false) await pub.send([Buffer.from(command.topic ?? "", "hex"), seqBytes(seq), payload]);
  print({ kind: "kept", seq });
}

// zeromq.js allows one send at a time per socket.
let sending = Promise.resolve();
const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  sending = sending.then(() => run(JSON.parse(line))).catch((error) => print({ kind: "error", message: String(error) }));
});
lines.on("close", () => {
  pub.close();
  router.close();
  process.exit(0);
});
