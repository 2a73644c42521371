/**
 * The KV-events publisher's thread (a Bun Worker started by kvEventsPublishThread.ts): the PUB and
 * replay ROUTER sockets of `--kv-events-publish` live here, so that accepting, refusing and timing
 * out connections (a flood of thousands) never runs on the request thread. Batches come encoded.
 */
import { KvEventPublisher } from "./kvEventPublisher.ts";
import type { KvEventsPublishThreadIn, KvEventsPublishThreadOut } from "./kvEventsPublishThreadMessages.ts";

declare const self: Worker;

/** How often the counters go to the request thread unasked. */
const STATS_EVERY_MS = 500;

let publisher: KvEventPublisher | null = null;

function send(message: KvEventsPublishThreadOut): void {
  self.postMessage(message);
}

self.onmessage = async (event: MessageEvent<KvEventsPublishThreadIn>) => {
  const command = event.data;
  switch (command.kind) {
    case "open":
      try {
        publisher = await KvEventPublisher.open(command.options, { firstSequence: command.firstSequence });
        send({ kind: "ready", endpoint: publisher.endpoint, replayEndpoint: publisher.replayEndpoint, stats: publisher.stats });
      } catch (error) {
        send({ kind: "failed", message: error instanceof Error ? error.message : String(error) });
      }
      return;
    case "publish":
      if (publisher === null) return send({ kind: "log", text: "ctxr serve: a KV event batch came before the publisher's sockets were open: dropped\n" });
      publisher.publishPayload(command.payload);
      return;
    case "stats":
      if (publisher !== null) send({ kind: "stats", id: command.id, stats: publisher.stats });
      return;
    case "close":
      clearInterval(statsTimer);
      await publisher?.close();
      send({ kind: "closed" });
      return;
  }
};

const statsTimer = setInterval(() => {
  if (publisher !== null) send({ kind: "stats", id: null, stats: publisher.stats });
}, STATS_EVERY_MS);
