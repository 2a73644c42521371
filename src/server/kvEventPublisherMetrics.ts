/** The KV events publisher's counters as Prometheus text (/metrics), wherever the publisher runs. */
import type { KvEventPublisherStats } from "./kvEventPublisher.ts";

export function kvEventPublisherMetrics(stats: KvEventPublisherStats): string {
  const lines: string[] = [];
  const metric = (name: string, type: "counter" | "gauge", help: string, value: number) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, `${name} ${value}`);
  };
  metric("ctxr_kv_events_batches_total", "counter", "KV event batches published (--kv-events-publish).", stats.batches);
  metric("ctxr_kv_events_total", "counter", "KV events published (BlockStored, BlockRemoved, AllBlocksCleared).", stats.events);
  metric("ctxr_kv_events_subscribers", "gauge", "Subscribers connected to the KV events socket.", stats.subscribers);
  metric("ctxr_kv_events_replay_requests_total", "counter", "Replay requests answered.", stats.replayRequests);
  metric("ctxr_kv_events_dropped_messages_total", "counter", "KV event messages dropped for a subscriber or replay client that did not keep up.", stats.dropped);
  metric("ctxr_kv_events_refused_connections_total", "counter", "Connections to the KV event sockets closed as they came, at --kv-events-max-connections.", stats.refusedConnections);
  metric("ctxr_kv_events_handshake_timeouts_total", "counter", "Connections to the KV event sockets closed for not completing the ZMTP handshake in time.", stats.handshakeTimeouts);
  metric("ctxr_kv_events_replay_buffer_bytes", "gauge", "Payload bytes of the batches kept for replay.", stats.replayBufferBytes);
  return lines.join("\n") + "\n";
}
