/**
 * The service's changes as they leave it: the change records, the snapshot of its whole state,
 * and the sink they go to before a request is acknowledged (the journal, serviceJournal.ts, or
 * the state shared through Redis, src/state/sharedState.ts). The contract between the service
 * and whatever keeps its changes.
 */
import type { RecoveryReport } from "./journal/journal.ts";
import type { ConversationEntries } from "./conversationStore.ts";

export type ChangeRecord =
  | { op: "insert"; id: string; keys: string[]; tokens: number[]; at: number }
  | { op: "remove"; ids: string[] }
  | { op: "conversation"; conversation: string; entries: ConversationEntries }
  | { op: "reset" };

export interface ServiceSnapshot {
  version: 1;
  /** [request id, block keys in order, tokens per block, last access ms], depth-first. */
  contexts: [string, string[], number[], number][];
  conversations: [string, ConversationEntries][];
}

/**
 * Where the service's changes go before they are acknowledged: its journal (a data dir), or
 * the state shared with other instances (src/state/sharedState.ts).
 */
export interface ChangeSink {
  /** Takes a change; `state` is called (synchronously, right after this change) when the sink wants a snapshot. */
  append(record: ChangeRecord, state: () => ServiceSnapshot): void;
  /** Resolves once every change appended so far is acknowledged; throws if changes can no longer be kept. */
  flush(): Promise<void>;
  /** Null while healthy; else why changes can no longer be kept. */
  readonly failureMessage: string | null;
  /** What recovery found at start (a journal's report), or null. */
  readonly report?: RecoveryReport | null;
  /** Brings the state up to date with changes other instances made (shared state); optional. */
  catchUp?(): Promise<void>;
  /** True when other instances read these changes (state shared through Redis). */
  readonly shared?: boolean;
  /** Null while the sink works fully; else why the server is degraded (still serving). */
  readonly degradedReason?: string | null;
  /** Non-null while the sink takes no more changes for now (shared state: its queue for Redis is full); requests that change state are refused. */
  readonly writeRefusal?: { message: string; retryAfterSeconds: number } | null;
  /** The sink's own figures (/v1/stats shared_state). */
  stats?(): SharedStateFigures;
  /** `finalState` is called when the sink keeps a final snapshot (a journal; shared state does not). */
  close(finalState: () => ServiceSnapshot): Promise<void>;
}

/** What a sink shared with other instances reports (src/state/sharedState.ts). */
export interface SharedStateFigures {
  url: string;
  instance: string;
  healthy: boolean;
  degraded_reason: string | null;
  last_entry: string;
  unsent_batches: number;
  unsent_bytes: number;
  queue_bytes_limit: number;
  unconfirmed_batches: number;
  snapshot_problem: string | null;
  recent_dead_letters: { id: string; reason: string }[];
  appended_entries: number;
  appended_changes: number;
  applied_entries: number;
  applied_changes: number;
  dropped_changes: number;
  write_errors: number;
  read_errors: number;
  resyncs: number;
  snapshots_written: number;
  acknowledged_degraded: number;
  skipped_entries: number;
  deleted_gaps: number;
  garbage_snapshots: number;
  refused_writes: number;
  rejected_batches: number;
}
