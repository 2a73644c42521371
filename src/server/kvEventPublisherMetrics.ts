/** The KV events publisher's counters as Prometheus text (/metrics), wherever the publisher runs. */
import { singleMetric } from "../http/prometheus.ts";

export interface KvEventPublisherStats {
  /** Batches published (the next batch's sequence number). */
  batches: number;
  events: number;
  /** Peers subscribed to the PUB socket. */
  subscribers: number;
  replayRequests: number;
  /** Messages not sent to a subscriber or replay client that did not keep up. */
  dropped: number;
  /** Connections closed as they came because the socket held its maximum, both sockets together. */
  refusedConnections: number;
  /** Connections closed because they did not complete the handshake in time. */
  handshakeTimeouts: number;
  /** Batches and payload bytes kept for replay. */
  replayBufferBatches: number;
  replayBufferBytes: number;
}


export function kvEventPublisherMetrics(stats: KvEventPublisherStats): string {
  return [
    singleMetric("ctxr_kv_events_batches_total", "counter", "KV event batches published (--kv-events-publish).", stats.batches),
    singleMetric("ctxr_kv_events_total", "counter", "KV events published (BlockStored, BlockRemoved, AllBlocksCleared).", stats.events),
    singleMetric("ctxr_kv_events_subscribers", "gauge", "Subscribers connected to the KV events socket.", stats.subscribers),
    singleMetric("ctxr_kv_events_replay_requests_total", "counter", "Replay requests answered.", stats.replayRequests),
    singleMetric("ctxr_kv_events_dropped_messages_total", "counter", "KV event messages dropped for a subscriber or replay client that did not keep up.", stats.dropped),
    singleMetric("ctxr_kv_events_refused_connections_total", "counter", "Connections to the KV event sockets closed as they came, at --kv-events-max-connections.", stats.refusedConnections),
    singleMetric("ctxr_kv_events_handshake_timeouts_total", "counter", "Connections to the KV event sockets closed for not completing the ZMTP handshake in time.", stats.handshakeTimeouts),
    singleMetric("ctxr_kv_events_replay_buffer_bytes", "gauge", "Payload bytes of the batches kept for replay.", stats.replayBufferBytes),
  ].join("");
}
