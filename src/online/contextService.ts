/**
 * The online context-reuse service behind `ctxr serve`: reorder, schedule,
 * dedup, evict, stats and reset over one live index and the conversations,
 * with every change journaled (when a data dir is given) before it is
 * acknowledged. HTTP-free: the server only validates and forwards.
 */
import { buildContextIndex, type IndexMethod } from "../index/buildIndex.ts";
import { contextSetFromArrays } from "../index/contextSet.ts";
import { RequestError } from "../http/requestError.ts";
import { scheduleBySearchPath } from "../index/schedule.ts";
import type { LinkageMethod } from "../kernels/index.ts";
import { dedupNoteSizer, priorityAnnotationBytes } from "./annotationSize.ts";
import { dedupAnnotation, docLabel, priorityAnnotation, withDefaults, type AnnotationTemplates } from "./annotations.ts";
import { BlockKeyTable } from "./blockKeyTable.ts";
import { forgetHashes, normalizeBlock, type BlockInput, type NormalizedBlock } from "./blocks.ts";
import { ConversationStore, type ConversationEntries } from "./conversationStore.ts";
import { LiveContextIndex, type LiveNode } from "./liveIndex.ts";
import { newRequestId, requestIdCandidates } from "./requestIds.ts";
import type { ChangeRecord, ChangeSink, ServiceSnapshot } from "./serviceChanges.ts";
import { ServiceJournal } from "./serviceJournal.ts";
import { LazyServiceJournal } from "./lazyServiceJournal.ts";
import { existsSync } from "node:fs";
import { DEFAULT_BUDGETS } from "./stateBudgets.ts";

export interface ServiceOptions {
  /** Journal directory; null keeps state in memory only (or in `sink`). */
  dataDir: string | null;
  /** With dataDir null: where changes go instead of a journal. */
  sink?: ChangeSink | null;
  /** A dataDir that does not exist yet is created (and locked) only when the first change is written (the default ./ctxr-data). */
  createDataDirOnFirstWrite?: boolean;
  capacityTokens?: number | null;
  ttlMs?: number | null;
  /** Tokens of a block given without "tokens" or "text". */
  blockTokens?: number;
  maxConversations?: number;
  /** Estimated heap bytes of the live index and its block keys (default DEFAULT_BUDGETS.indexBytes; null: unlimited). */
  maxIndexBytes?: number | null;
  /** Estimated heap bytes of the dedup conversation records (default DEFAULT_BUDGETS.dedupBytes; null: unlimited). */
  maxDedupBytes?: number | null;
  /** UTF-8 bytes of the annotations one request may render (default DEFAULT_BUDGETS.annotationBytes). */
  maxAnnotationBytes?: number;
  /** Journal records between snapshots. */
  snapshotEvery?: number;
  /** Clock (ms), replaceable in tests. */
  now?: () => number;
}

export interface ReorderResult {
  blocks: BlockInput[];
  order: number[];
  request_id: string;
  prefix_blocks: number;
  prefix_tokens: number;
  /** The prefix the blocks would have found in the order given (the baseline prefix_tokens beats). */
  input_order_prefix_tokens: number;
  annotation: string;
}

export interface ScheduleOptions {
  method?: IndexMethod;
  alpha?: number;
  linkage?: LinkageMethod;
}

export class ContextService {
  private readonly index: LiveContextIndex;
  private readonly conversations: ConversationStore;
  private readonly keys = new BlockKeyTable();
  private readonly counters = { reorderedContexts: 0, promptTokens: 0, prefixHitTokens: 0, dedupBlocks: 0, duplicateBlocks: 0, evicted: 0 };
  private readonly blockTokens: number;
  private readonly now: () => number;
  private readonly maxIndexBytes: number | null;
  private readonly maxAnnotationBytes: number;

  private constructor(
    options: ServiceOptions,
    private readonly journal: ChangeSink | null,
  ) {
    this.maxIndexBytes = options.maxIndexBytes === undefined ? DEFAULT_BUDGETS.indexBytes : options.maxIndexBytes;
    this.maxAnnotationBytes = options.maxAnnotationBytes ?? DEFAULT_BUDGETS.annotationBytes;
    // The key table counts against the index's budget: the index evicts down to what the table leaves it.
    this.index = new LiveContextIndex({
      capacityTokens: options.capacityTokens ?? null,
      ttlMs: options.ttlMs ?? null,
      maxBytes: this.maxIndexBytes,
      externalBytes: () => this.keys.bytes,
      onBlockFreed: (block) => this.keys.release(block),
    });
    this.conversations = new ConversationStore({
      maxConversations: options.maxConversations,
      maxBytes: options.maxDedupBytes === undefined ? DEFAULT_BUDGETS.dedupBytes : options.maxDedupBytes,
    });
    this.blockTokens = options.blockTokens ?? 256;
    this.now = options.now ?? Date.now;
  }

  static async open(options: ServiceOptions): Promise<ContextService> {
    if (options.dataDir !== null && options.sink) throw new Error("a service keeps its changes in a journal or in a sink, not both");
    const lazy = options.dataDir !== null && options.createDataDirOnFirstWrite === true && !existsSync(options.dataDir);
    const journal = options.dataDir === null || lazy ? null : await ServiceJournal.open(options.dataDir, options.snapshotEvery);
    const sink = lazy ? new LazyServiceJournal(options.dataDir!, options.snapshotEvery) : (journal ?? options.sink ?? null);
    const service = new ContextService(options, sink);
    if (journal !== null) {
      const { snapshot, records } = journal.recovered;
      if (snapshot !== null) service.restore(snapshot);
      for (const record of records) service.apply(record);
      // A smaller budget than the journal was written under: the least recently used contexts go now.
      service.index.evictOverCapacity();
    }
    return service;
  }

  /** Null while healthy; else why changes can no longer be made durable (the journal failed). */
  get failure(): string | null {
    return this.journal?.failureMessage ?? null;
  }

  /** With state shared through Redis: applies what other instances have already acknowledged. Call before reading state for a request. */
  async catchUp(): Promise<void> {
    await this.journal?.catchUp?.();
  }

  /** Whether other instances share this state (--state): what they must see has to be flushed before answering. */
  get sharedWithOtherInstances(): boolean {
    return this.journal?.shared === true;
  }

  /** Null unless the service runs degraded (shared state unreachable): it still serves. */
  get degradedReason(): string | null {
    return this.journal?.degradedReason ?? null;
  }

  /** Non-null while requests that change the state must be refused for now (503 with Retry-After). */
  get writeRefusal(): { message: string; retryAfterSeconds: number } | null {
    return this.journal?.writeRefusal ?? null;
  }

  /** What recovery found when the service opened (null without a data dir). */
  get recovery() {
    return this.journal?.report ?? null;
  }

  /**
   * With `deferDurability`, returns before the changes are on disk: the caller
   * must await `durable()` before acknowledging anything (the proxy overlaps the
   * fsync with the engine's work).
   */
  async reorder(
    contexts: BlockInput[][],
    conversationId?: string,
    templates?: Partial<AnnotationTemplates>,
    options: { deferDurability?: boolean } = {},
  ): Promise<{ results: ReorderResult[]; schedule: number[] }> {
    const t = withDefaults(templates);
    const normalized = contexts.map((blocks, i) => this.normalizeContext(blocks, `contexts[${i}]`));
    this.checkAnnotationBytes(contexts.reduce((total, blocks) => total + priorityAnnotationBytes(t, blocks.length), 0));
    const dense = normalized.map((blocks) => Int32Array.from(blocks, (b) => this.keys.intern(b.key)));
    const { processingOrder, preferred } = batchPreference(normalized);
    const now = this.now();
    const results = new Array<ReorderResult>(contexts.length);
    const nodes: LiveNode[] = new Array(contexts.length);

    for (const c of processingOrder) {
      const match = this.index.search(dense[c]!);
      const inPrefix = new Set(match.prefix);
      const positionOf = new Map<number, number>();
      dense[c]!.forEach((b, position) => positionOf.set(b, position));
      const order = [...Array.from(match.prefix, (b) => positionOf.get(b)!), ...preferred[c]!.filter((p) => !inPrefix.has(dense[c]![p]!))];
      const ordered = Int32Array.from(order, (p) => dense[c]![p]!);
      const tokens = order.map((p) => normalized[c]![p]!.tokens);
      const inputOrderTokens = this.index.prefixTokensInOrder(dense[c]!, normalized[c]!.map((b) => b.tokens));
      const requestId = newRequestId();
      const inserted = this.index.insert(ordered, tokens, requestId, now);
      this.record({ op: "insert", id: requestId, keys: order.map((p) => normalized[c]![p]!.key), tokens, at: now });
      nodes[c] = inserted.node;
      results[c] = {
        blocks: order.map((p) => contexts[c]![p]!),
        order,
        request_id: requestId,
        prefix_blocks: inserted.reusedBlocks,
        prefix_tokens: inserted.reusedTokens,
        input_order_prefix_tokens: inputOrderTokens,
        annotation: priorityAnnotation(t, order),
      };
      this.counters.reorderedContexts++;
      this.counters.promptTokens += tokens.reduce((a, b) => a + b, 0);
      this.counters.prefixHitTokens += inserted.reusedTokens;
    }
    if (conversationId !== undefined) {
      const entries: ConversationEntries = [];
      for (const c of processingOrder) results[c]!.order.forEach((p, at) => entries.push([normalized[c]![p]!.key, docLabel(t, at)]));
      this.recordConversation(conversationId, entries);
    }
    // Paths once every context is in: a later insert may split an earlier context's edge.
    const paths = nodes.map((node) => this.index.searchPath(node));
    this.evictOverCapacity();
    const schedule = scheduleBySearchPath(paths, processingOrder);
    if (!options.deferDurability) await this.journal?.flush();
    return { results, schedule };
  }

  /** Stateless: the offline index build of one batch (same as `ctxr index build`). */
  schedule(contexts: BlockInput[][], options: ScheduleOptions = {}) {
    const normalized = contexts.map((blocks, i) => this.normalizeContext(blocks, `contexts[${i}]`));
    const set = contextSetFromArrays(normalized.map((blocks) => blocks.map((b) => b.key)));
    const built = buildContextIndex(set, { method: options.method, alpha: options.alpha, linkage: options.linkage });
    const results = new Array<{ blocks: BlockInput[]; path: number[] }>(contexts.length);
    for (const s of built.scheduled) {
      const order = originalPositions(normalized[s.input]!, s.blocks, set.blockIds as string[]);
      results[s.input] = { blocks: order.map((p) => contexts[s.input]![p]!), path: s.path };
    }
    return { schedule: built.scheduled.map((s) => s.input), results, method: built.method };
  }

  async dedup(conversationId: string, blocks: BlockInput[], templates?: Partial<AnnotationTemplates>) {
    const t = withDefaults(templates);
    const normalized = this.normalizeContext(blocks, "blocks");
    const earlierLabels = normalized.map((block) => this.conversations.labelOf(conversationId, block.key));
    const noteBytes = dedupNoteSizer(t);
    this.checkAnnotationBytes(earlierLabels.reduce((total: number, earlier) => (earlier === undefined ? total : total + noteBytes(earlier)), 0));
    const out: (BlockInput | string)[] = [];
    const duplicates: (number | string)[] = [];
    const entries: ConversationEntries = [];
    normalized.forEach((block, position) => {
      const earlier = earlierLabels[position];
      if (earlier !== undefined) {
        out.push(dedupAnnotation(t, earlier));
        duplicates.push(block.label);
      } else {
        out.push(blocks[position]!);
        entries.push([block.key, docLabel(t, position)]);
      }
    });
    this.recordConversation(conversationId, entries);
    this.counters.dedupBlocks += blocks.length;
    this.counters.duplicateBlocks += duplicates.length;
    await this.journal?.flush();
    return { blocks: out, duplicates };
  }

  /** Records blocks as sent in a conversation with their labels (the first label of a block is kept); see `durable`. */
  recordSent(conversationId: string, entries: [block: BlockInput, label: string][]): void {
    if (entries.length === 0) return;
    this.recordConversation(
      conversationId,
      entries.map(([block, label]) => [normalizeBlock(block, { blockTokens: this.blockTokens }).key, label]),
    );
  }

  /** Resolves once every change made so far is on disk. */
  async durable(): Promise<void> {
    await this.journal?.flush();
  }

  /** For each block, its label when it was first sent in the conversation, else undefined. Changes nothing. */
  sentBefore(conversationId: string, blocks: BlockInput[]): (string | undefined)[] {
    return blocks.map((block) => this.conversations.labelOf(conversationId, normalizeBlock(block, { blockTokens: this.blockTokens }).key));
  }

  /** Removes contexts by the request ids engines report; returns how many were in the index. */
  async evict(requestIds: string[]): Promise<{ evicted: number }> {
    const removed: string[] = [];
    for (const reported of requestIds) {
      const id = requestIdCandidates(reported).find((candidate) => this.index.hasRequest(candidate));
      if (id !== undefined && this.index.remove(id)) removed.push(id);
    }
    if (removed.length > 0) this.record({ op: "remove", ids: removed });
    this.counters.evicted += removed.length;
    await this.journal?.flush();
    return { evicted: removed.length };
  }

  /** Removes every context from the index (an engine cleared its cache); conversations are kept. */
  async evictAll(): Promise<{ evicted: number }> {
    return this.evict([...this.index.contexts()].map(([id]) => id));
  }

  async reset(): Promise<void> {
    this.clearState();
    forgetHashes();
    this.record({ op: "reset" });
    await this.journal?.flush();
  }

  stats() {
    return {
      contexts: this.index.contextCount,
      nodes: this.index.nodeCount,
      index_tokens: this.index.tokens,
      distinct_blocks: this.keys.size,
      index_bytes: this.indexBytes,
      index_bytes_limit: this.maxIndexBytes,
      index_budget_evicted_contexts: this.index.evictedForByteBudget,
      conversations: this.conversations.size,
      dedup_bytes: this.conversations.bytes,
      dedup_bytes_limit: this.conversations.byteLimit,
      dedup_budget_evicted_conversations: this.conversations.evictedForByteBudget,
      annotation_bytes_limit: this.maxAnnotationBytes,
      capacity_tokens: this.index.options.capacityTokens,
      ttl_ms: this.index.options.ttlMs,
      reordered_contexts: this.counters.reorderedContexts,
      prompt_tokens: this.counters.promptTokens,
      prefix_hit_tokens: this.counters.prefixHitTokens,
      estimated_prefix_hit_ratio: this.counters.promptTokens === 0 ? 0 : this.counters.prefixHitTokens / this.counters.promptTokens,
      dedup_blocks: this.counters.dedupBlocks,
      duplicate_blocks: this.counters.duplicateBlocks,
      evicted_contexts: this.counters.evicted,
      persistent: this.journal !== null,
      ...(this.journal?.stats === undefined ? {} : { shared_state: this.journal.stats() }),
    };
  }

  /** Expires contexts past their TTL (the server calls this on a timer). */
  async expire(): Promise<number> {
    const expired = this.index.expire(this.now());
    if (expired.length > 0) {
      this.record({ op: "remove", ids: expired });
      this.counters.evicted += expired.length;
      await this.journal?.flush();
    }
    return expired.length;
  }

  async close(): Promise<void> {
    if (this.journal !== null) await this.journal.close(() => this.snapshotState());
  }

  private normalizeContext(blocks: BlockInput[], field: string): NormalizedBlock[] {
    const seen = new Set<string>();
    return blocks.map((block, position) => {
      const normalized = normalizeBlock(block, { blockTokens: this.blockTokens });
      if (seen.has(normalized.key)) {
        throw new RequestError(`${field}[${position}]`, `block ${JSON.stringify(normalized.label)} appears twice in one context`);
      }
      seen.add(normalized.key);
      return normalized;
    });
  }

  /** Estimated heap bytes of the live index and its key table. */
  private get indexBytes(): number {
    return this.index.bytes + this.keys.bytes;
  }

  /** A request whose annotations would exceed the limit is refused before it changes anything. */
  private checkAnnotationBytes(bytes: number): void {
    if (bytes > this.maxAnnotationBytes) {
      throw new RequestError(
        "templates",
        `the annotations of this request would take ${bytes} bytes, over the server's limit of ${this.maxAnnotationBytes} (--max-annotation-bytes); use shorter templates or fewer blocks`,
      );
    }
  }

  private recordConversation(conversationId: string, entries: ConversationEntries): void {
    this.conversations.record(conversationId, entries);
    this.record({ op: "conversation", conversation: conversationId, entries });
  }

  private evictOverCapacity(): void {
    const evicted = this.index.evictOverCapacity();
    if (evicted.length === 0) return;
    this.record({ op: "remove", ids: evicted });
    this.counters.evicted += evicted.length;
  }

  private record(record: ChangeRecord): void {
    this.journal?.append(record, () => this.snapshotState());
  }

  private clearState(): void {
    this.index.clear();
    this.conversations.clear();
    this.keys.clear();
  }

  /** Applies a journaled change during recovery (the same effect it had when first made). */
  private apply(record: ChangeRecord): void {
    this.applyShared(record, () => false);
  }

  /**
   * Applies another instance's change (state shared through Redis) without recording it again.
   * `replaceLabel(conversation, key)`: whether the change's label of a block replaces the one
   * this replica has (which it wrote itself, later in the shared log's order).
   */
  applyShared(record: ChangeRecord, replaceLabel: (conversation: string, key: string) => boolean): void {
    switch (record.op) {
      case "insert":
        if (!this.index.hasRequest(record.id)) this.index.insert(Int32Array.from(record.keys, (k) => this.keys.intern(k)), record.tokens, record.id, record.at);
        break;
      case "remove":
        for (const id of record.ids) this.index.remove(id);
        break;
      case "conversation":
        this.conversations.record(record.conversation, record.entries, (key) => replaceLabel(record.conversation, key));
        break;
      case "reset":
        this.clearState();
        break;
    }
  }

  /** After applying shared changes: evicts what the local budgets no longer hold (recorded). */
  enforceBudgets(): void {
    this.evictOverCapacity();
  }

  /** The whole state, as a snapshot holds it. */
  exportState(): ServiceSnapshot {
    return this.snapshotState();
  }

  /** Replaces the whole state by a snapshot's (shared state resynchronising); records nothing. */
  importState(snapshot: ServiceSnapshot): void {
    this.clearState();
    this.restore(snapshot);
  }

  private snapshotState(): ServiceSnapshot {
    const contexts: ServiceSnapshot["contexts"] = [];
    for (const [id, node] of this.index.contexts()) {
      const sequence = this.index.sequence(node);
      contexts.push([id, Array.from(sequence, (b) => this.keys.keyOf(b)), Array.from(sequence, (b) => this.index.tokensOf(b)), node.lastAccess]);
    }
    return { version: 1, contexts, conversations: this.conversations.export() };
  }

  private restore(snapshot: ServiceSnapshot): void {
    for (const [id, keys, tokens, at] of snapshot.contexts) this.index.insert(Int32Array.from(keys, (k) => this.keys.intern(k)), tokens, id, at);
    for (const [conversation, entries] of snapshot.conversations) this.conversations.record(conversation, entries);
  }
}

/**
 * For a batch, the offline trie decides which contexts run together and the
 * order their shared blocks should take; a single context keeps its order.
 */
function batchPreference(normalized: NormalizedBlock[][]): { processingOrder: number[]; preferred: number[][] } {
  if (normalized.length === 1) return { processingOrder: [0], preferred: [normalized[0]!.map((_, p) => p)] };
  const set = contextSetFromArrays(normalized.map((blocks) => blocks.map((b) => b.key)));
  const built = buildContextIndex(set, { method: "trie" });
  const preferred = new Array<number[]>(normalized.length);
  for (const s of built.scheduled) preferred[s.input] = originalPositions(normalized[s.input]!, s.blocks, set.blockIds as string[]);
  return { processingOrder: built.scheduled.map((s) => s.input), preferred };
}

/** For a reordered context (dense blocks of a set keyed by block key), each block's original position. */
function originalPositions(original: NormalizedBlock[], reordered: Int32Array, keyOf: string[]): number[] {
  const positionOf = new Map(original.map((b, position) => [b.key, position]));
  return Array.from(reordered, (b) => positionOf.get(keyOf[b]!)!);
}
