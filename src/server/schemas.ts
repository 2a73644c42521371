/**
 * The zod schemas of the HTTP API: request bodies (validated at run time, with
 * the server's limits built in) and responses (documentation only). The OpenAPI
 * document is generated from these same schemas.
 */
import { z } from "@hono/zod-openapi";
import { placeholderCount } from "../online/annotationSize.ts";
import type { ServerLimits } from "../http/limits.ts";

const BLOCK_MESSAGE = "expected a block: an integer, a non-empty string, or an object with \"id\" and/or \"text\" (and optional \"tokens\")";

/** Every schema of the API, for one set of limits. */
export function createSchemas(limits: ServerLimits) {
  const BlockId = z
    .union([z.int(), z.string().min(1).max(limits.maxIdChars)], { error: (issue) => (issue.code === "invalid_union" ? "expected a block id: an integer or a non-empty string" : undefined) })
    .openapi({ description: `An integer or a non-empty string of at most ${limits.maxIdChars} characters (1 and "1" are different blocks).`, example: 42 });

  const BlockObject = z
    .strictObject({
      id: BlockId.optional(),
      text: z.string().max(limits.maxTextChars).optional().openapi({ description: "The block's text; without an id, the block is identified by a hash of its whitespace-normalized text." }),
      tokens: z.int().min(1).max(limits.maxBlockTokens).optional().openapi({ description: "Tokens of the document (default: estimated from the text, else the server's --document-tokens)." }),
    })
    .refine((block) => block.id !== undefined || block.text !== undefined, { message: 'a block object needs "id" or "text"' })
    .openapi({ example: { id: "doc-7", text: "The cat sat on the mat.", tokens: 8 } });

  const Block = z
    .union([z.int(), z.string().min(1).max(limits.maxIdChars), BlockObject], { error: (issue) => (issue.code === "invalid_union" ? BLOCK_MESSAGE : undefined) })
    .openapi("Block", { description: 'A context block: an id (integer or non-empty string) or {"id"?, "text"?, "tokens"?} with at least one of id and text.' });

  const Context = z.array(Block).min(1).max(limits.maxBlocks).openapi({ description: `A context's blocks, most relevant first (1 to ${limits.maxBlocks}, no block twice).` });
  const Contexts = z.array(Context).min(1).max(limits.maxContexts).openapi({ description: `1 to ${limits.maxContexts} contexts.` });

  const template = (placeholder: string | null, description: string) => {
    const base = z.string().max(limits.maxTemplateChars);
    if (placeholder === null) return base.optional().openapi({ description });
    const most = limits.maxTemplatePlaceholders;
    return base
      .includes(placeholder, { message: `must contain ${placeholder}` })
      .refine((text) => placeholderCount(text, placeholder) <= most, { message: `must contain ${placeholder} at most ${most} times (the server's limit)` })
      .optional()
      .openapi({ description: `${description} At most ${most} times.` });
  };
  const Templates = z
    .strictObject({
      priority: template("{order}", 'Priority annotation; "{order}" becomes the document labels in original relevance order.'),
      doc: template("{n}", 'A document label; "{n}" becomes its 1-based position in the blocks returned.'),
      separator: template(null, "Between labels in {order}."),
      dedup: template("{doc}", 'Replaces a block sent earlier in the conversation; "{doc}" becomes its earlier label.'),
    })
    .openapi("AnnotationTemplates", {
      description: "Annotation templates for this request (defaults shown).",
      example: { priority: "Please read the context in the following priority order: {order} and answer the question.", doc: "[Doc {n}]", separator: " > ", dedup: "Please refer to {doc} in the previous conversation." },
    });

  const ConversationId = z.string().min(1).max(limits.maxConversationIdChars).openapi({ description: `A conversation id (1 to ${limits.maxConversationIdChars} characters).`, example: "chat-42" });

  const ReorderRequest = z
    .strictObject({ contexts: Contexts, conversation_id: ConversationId.optional(), templates: Templates.optional() })
    .openapi("ReorderRequest", { example: { contexts: [[4, 1, 2], [2, 9, 1]], conversation_id: "chat-42" } });

  const ScheduleRequest = z
    .strictObject({
      contexts: Contexts,
      method: z.enum(["auto", "trie", "cluster"]).optional().openapi({ description: "Index build method (default auto)." }),
      alpha: z.number().min(0).max(1e6).optional().openapi({ description: "Position weight of the context distance (default 0.001)." }),
      linkage: z.enum(["average", "single", "complete"]).optional().openapi({ description: "Linkage of the cluster method (default average)." }),
    })
    .refine((body) => body.method !== "cluster" || body.contexts.length <= limits.maxClusterContexts, {
      path: ["method"],
      message: `"cluster" takes at most ${limits.maxClusterContexts} contexts (its time and memory grow as N²); use "trie" or "auto"`,
    })
    .openapi("ScheduleRequest", { example: { contexts: [[4, 1, 2], [2, 9, 1], [7, 8]], method: "auto" } });

  const DedupRequest = z
    .strictObject({ conversation_id: ConversationId, blocks: z.array(Block).max(limits.maxBlocks), templates: Templates.optional() })
    .openapi("DedupRequest", { example: { conversation_id: "chat-42", blocks: [1, 5, 9] } });

  const RequestId = z.string().min(1).max(limits.maxIdChars);
  const RequestIds = z.array(RequestId).max(limits.maxRequestIds);
  const EvictByIds = z
    .strictObject({ request_ids: RequestIds.openapi({ description: 'Request ids as issued, or as engines report them ("cmpl-"/"chatcmpl-" prefixes, vLLM "-<n>-<hex>" suffixes).' }) })
    .openapi("EvictByRequestIds", { example: { request_ids: ["chatcmpl-ctxr-0123456789abcdef0123456789abcdef"] } });
  const KvEvent = z
    .union([
      z.looseObject({
        type: z.string().min(1).max(limits.maxIdChars).openapi({ description: '"BlockRemoved" (removes the contexts of its request_ids), "AllBlocksCleared" (the engine emptied its cache); other types are ignored.' }),
        request_ids: RequestIds.optional().openapi({ description: "The requests whose cached blocks were removed (BlockRemoved)." }),
      }),
      z.array(z.unknown()).min(1).openapi({ description: 'An event in array form, ["AllBlocksCleared"]; other array events are ignored.' }),
    ])
    .openapi("KvEvent", { example: { type: "BlockRemoved", request_ids: ["chatcmpl-ctxr-0123456789abcdef0123456789abcdef"] } });
  const KvEventBatch = z
    .looseObject({
      ts: z.number().optional().openapi({ description: "When the engine emitted the batch (ignored)." }),
      events: z.array(KvEvent).max(limits.maxRequestIds),
      upstream: z
        .union([z.string().min(1).max(limits.maxIdChars), z.int().min(0)])
        .optional()
        .openapi({ description: "With --upstream: the engine that sent the batch (its URL as /v1/stats shows it, or its 0-based position); AllBlocksCleared then removes only the contexts routed to it." }),
    })
    .openapi("KvEventBatch", { example: { ts: 1718000000.5, events: [{ type: "BlockRemoved", request_ids: ["cmpl-ctxr-0123456789abcdef0123456789abcdef-0-1a2b3c4d"] }, { type: "BlockStored" }, { type: "AllBlocksCleared" }] } });
  const EvictRequest = z
    .union([EvictByIds, KvEventBatch, z.array(KvEventBatch).min(1).max(limits.maxRequestIds)])
    .openapi("EvictRequest", {
      description: "Request ids, an engine KV-event batch (vLLM/SGLang style), or a list of batches.",
      example: { request_ids: ["chatcmpl-ctxr-0123456789abcdef0123456789abcdef"] },
    });

  const ReorderResult = z
    .object({
      blocks: z.array(Block).openapi({ description: "The context's blocks in the order to send them (reusable prefix first)." }),
      order: z.array(z.int()).openapi({ description: "Original position of each returned block." }),
      request_id: z.string().openapi({ description: "Id of the context in the live index (for evict)." }),
      prefix_blocks: z.int().openapi({ description: "Leading blocks already in the index (expected prefix-cache hits)." }),
      prefix_tokens: z.int(),
      input_order_prefix_tokens: z.int().openapi({ description: "Leading tokens the index held for the blocks in the order given: the prefix-cache hit without reordering (compare prefix_tokens)." }),
      annotation: z.string().openapi({ description: "States the original relevance order of the returned blocks." }),
    })
    .openapi("ReorderResult");

  const ReorderResponse = z
    .object({ results: z.array(ReorderResult).openapi({ description: "One result per context, in request order." }), schedule: z.array(z.int()).openapi({ description: "Context indices in the order to run them." }) })
    .openapi("ReorderResponse");

  const ScheduleResponse = z
    .object({
      schedule: z.array(z.int()),
      results: z.array(z.object({ blocks: z.array(Block), path: z.array(z.int()).openapi({ description: "Search path in the index tree." }) })),
      method: z.enum(["trie", "cluster"]),
    })
    .openapi("ScheduleResponse");

  const DedupResponse = z
    .object({
      blocks: z.array(Block).openapi({ description: "Blocks to send; one sent earlier in the conversation is replaced by its annotation (a string)." }),
      duplicates: z.array(z.union([z.int(), z.string()])).openapi({ description: "Ids of the replaced blocks (text blocks: \"text:<hash>\")." }),
    })
    .openapi("DedupResponse");

  const EvictResponse = z.object({ evicted: z.int().openapi({ description: "Contexts removed from the index." }) }).openapi("EvictResponse");
  const ResetResponse = z.object({ reset: z.literal(true) }).openapi("ResetResponse");
  const HealthResponse = z
    .object({
      status: z.enum(["ok", "degraded", "failing"]).openapi({ description: "degraded: serving, but the state shared through Redis (--state) is unreachable, so this instance is not sharing its changes." }),
      error: z.string().optional().openapi({ description: "Why the server is failing (its journal cannot write) or degraded." }),
    })
    .openapi("HealthResponse");
  const ReadyResponse = z
    .object({
      status: z.enum(["ready", "not_ready"]),
      reason: z.string().optional().openapi({ description: "Why nothing can serve: the journal, the model runner, or each upstream's last probe." }),
      upstreams: z
        .array(
          z.object({
            url: z.string(),
            serving: z.boolean(),
            engine: z.string().openapi({ description: "How ctxr talks to it: vllm, sglang, llamacpp or openai." }),
            detected: z.string().nullable().openapi({ description: "What its endpoints said it is (--engine auto), e.g. \"vLLM 0.9.1\"; null before it answered or without auto." }),
            reason: z.string().nullable(),
          }),
        )
        .optional(),
    })
    .openapi("ReadyResponse");

  const RecoveryReport = z
    .object({
      snapshotSeq: z.int().nullable(),
      recordsReplayed: z.int(),
      skipped: z.array(z.object({ file: z.string(), offset: z.int(), bytes: z.int(), reason: z.string() })),
      discardedSnapshots: z.array(z.object({ file: z.string(), reason: z.string() })),
    })
    .openapi("RecoveryReport", { description: "What the journal found at start-up (null without a data dir)." });

  const FirstTokenTotals = z.object({ requests: z.int(), seconds: z.number().openapi({ description: "Summed time to first token." }) });
  const UpstreamStats = z
    .object({
      url: z.string().openapi({ description: "The upstream URL, without credentials." }),
      healthy: z.boolean().openapi({ description: "In rotation (false: out after a connection error or timeout, until retry_in_ms)." }),
      in_flight: z.int(),
      requests: z.int().openapi({ description: "Requests sent (rewritten and passed through)." }),
      errors: z.int().openapi({ description: "Connection errors, timeouts and answers with status >= 400." }),
      prompt_tokens_received: z.int().openapi({ description: "Prompt tokens of the messages as clients sent them (accepted requests; documents field rendered), in saved_tokens.upstreams[].unit: the model's tokenizer (--tokenizer) or the estimate of 4 characters a token." }),
      prompt_tokens_forwarded: z.int().openapi({ description: "Prompt tokens of the messages as forwarded, in the same unit as prompt_tokens_received." }),
      documents: z.int(),
      documents_deduplicated: z.int().openapi({ description: "Documents replaced by a note pointing to an earlier turn." }),
      estimated_cached_tokens: z.int().openapi({ description: "Prompt tokens the live index expected the upstream to have cached." }),
      cached_tokens: z.int().openapi({ description: "Sum of usage.prompt_tokens_details.cached_tokens the upstream reported (plus the reused chunks a ctxr upstream reports in usage.ctxr)." }),
      cached_tokens_reports: z.int().openapi({ description: "Answers whose usage reported cached tokens." }),
      first_token: z
        .object({
          reused: FirstTokenTotals.openapi({ description: "Streamed answers whose usage reported cached prompt tokens (> 0)." }),
          not_reused: FirstTokenTotals.openapi({ description: "Streamed answers whose usage reported no cached prompt token." }),
          unknown: FirstTokenTotals.openapi({ description: "Streamed answers whose usage said nothing of cached tokens, or was not read." }),
        })
        .openapi({ description: "Time to first token as the proxy measures it: from sending a streamed request to the first event carrying a token." }),
      consecutive_failures: z.int(),
      retry_in_ms: z.number().nullable().openapi({ description: "When an upstream out of rotation is tried again." }),
      last_error: z.string().nullable(),
      kv_events: z
        .object({
          connected: z.boolean().openapi({ description: "Connected to the engine's publisher (routing trusts the mirror once it has also caught up)." }),
          blocks: z.int().openapi({ description: "Blocks of the engine's own KV memory the mirror holds." }),
          tokens: z.int(),
          orphans: z.int().openapi({ description: "Stored blocks whose parent the mirror did not hold (events missed): left out." }),
          offloadEvents: z.int().openapi({ description: "Events of offload tiers (CPU, disk): counted, not mirrored." }),
          lagMs: z.number().nullable().openapi({ description: "Arrival time minus the engine's timestamp of the last live batch." }),
          contextsEvicted: z.int().openapi({ description: "Contexts that left the live index because the engine dropped one of their blocks." }),
          bytes: z.int().openapi({ description: "Estimated heap bytes of the mirror (part of the proxy's routing_bytes)." }),
          evictedForBytes: z.int().openapi({ description: "Blocks the mirror forgot to stay within its share of --max-routing-bytes." }),
          predicted_cached_tokens: z.int().openapi({ description: "Prompt tokens the mirror showed cached where requests went (compare cached_tokens)." }),
          subscriber: z.record(z.string(), z.unknown()).optional().openapi({ description: "The subscriber's counters: batches, events, gaps, replays, resyncs (by reason), malformed (by kind), last_seq, layout." }),
        })
        .passthrough()
        .optional()
        .openapi({ description: "With --kv-events: the mirror of the engine's cache kept from its KV events." }),
    })
    .openapi("UpstreamStats");

  const TimeToFirstToken = z.object({
    requests: z.int().openapi({ description: "Requests that reached their first token." }),
    seconds: z.number().openapi({ description: "Their times to first token, summed (divide by requests for the mean)." }),
  });
  const EngineStats = z
    .object({
      running: z.int().openapi({ description: "Sequences in the running batch." }),
      waiting: z.int().openapi({ description: "Requests waiting for admission (the queue)." }),
      max_waiting: z.int().openapi({ description: "--max-waiting-requests." }),
      kv_blocks_used: z.int(),
      kv_blocks_total: z.int(),
      block_size: z.int().openapi({ description: "Tokens a KV block holds." }),
      prefill_tokens: z.int().openapi({ description: "Prompt tokens run through the model (recomputed ones included)." }),
      prefix_cache_hit_tokens: z.int().openapi({ description: "Prompt tokens found in the automatic prefix cache." }),
      first_token: z
        .object({
          reused: TimeToFirstToken.openapi({ description: "Requests whose prompt reused cached KV (prefix or chunk cache)." }),
          not_reused: TimeToFirstToken.openapi({ description: "Requests whose prompt was computed whole." }),
          prompt_tokens_cached: z.int().openapi({ description: "Prompt tokens of those requests whose KV came from a cache." }),
          prompt_tokens_computed: z.int().openapi({ description: "Prompt tokens of those requests that were run through the model." }),
        })
        .nullable()
        .openapi({ description: "Counted when each request's first token is generated (null when the server keeps no latency figures)." }),
      reuse_scoring: z
        .object({
          mode: z.enum(["idle", "sync"]).openapi({ description: "--reuse-scoring: stored variants' shift measured in the idle time or on the request path." }),
          budget: z.number().openapi({ description: "--reuse-scoring-budget: share of wall time background work may keep the runner busy (0: off)." }),
          jobs: z
            .record(
              z.string(),
              z.object({ pending: z.int(), run: z.int(), deferred: z.int(), dropped: z.int(), failed: z.int(), runner_seconds: z.number() }),
            )
            .openapi({ description: "Background jobs by kind (shift_scoring): waiting, run, deferred at least once, dropped, failed, and the runner seconds they took." }),
          measurements: z.record(z.string(), z.int()).openapi({ description: "Shift measurements by outcome: scored, gone, not-resident, no-room." }),
          unscored_chunks: z.record(z.string(), z.int()).openapi({ description: "Reused chunks whose variant had no measured shift yet, by policy (they fell back to the attention scores)." }),
          reused_unscored_queued: z.int().openapi({ description: "Shift measurements moved to the front of the background queue because a request reused their variant before it was scored." }),
        })
        .optional()
        .openapi({ description: "Every stored chunk variant's measured shift (docs/reuse-scoring.md)." }),
      reuse_audit: z
        .object({
          rate: z.number().openapi({ description: "--reuse-audit-rate: share of requests served with reused chunks compared with full prefill (0: off)." }),
          tokens: z.int().openapi({ description: "--reuse-audit-tokens: greedy tokens compared." }),
          warn_below: z.number().openapi({ description: "--reuse-audit-warn-below: a cell's recent agreement below it logs a warning." }),
          audited: z.int().openapi({ description: "Audits run to the end (samples)." }),
          pending: z.int().openapi({ description: "Audits captured and not finished." }),
          dropped: z.int().openapi({ description: "Sampled requests not audited (no blocks, too many pending, background work off, runner restart)." }),
          deferred: z.int().openapi({ description: "Audit pieces that waited at least once for live requests or the budget." }),
          failed: z.int().openapi({ description: "Audits that failed (logged)." }),
          cells: z
            .array(
              z.object({
                model: z.string(),
                policy: z.string(),
                ratio: z.number(),
                count: z.int(),
                top1_share: z.number().openapi({ description: "Share of samples whose first token (top-1) was full prefill's." }),
                kl_mean: z.number().openapi({ description: "Mean first-token KL(full || reused), nats." }),
                kl_p50: z.number().openapi({ description: "Median KL over the newest 1,000 samples." }),
                kl_p90: z.number().openapi({ description: "90th percentile KL over the newest 1,000 samples." }),
                agreement_mean: z.number().openapi({ description: "Mean greedy-token agreement (common prefix share)." }),
                recent_agreement: z.number().openapi({ description: "Mean agreement of the newest 20 samples (what the warning watches)." }),
              }),
            )
            .openapi({ description: "Figures by model, policy and recompute ratio." }),
        })
        .optional()
        .openapi({ description: "The live quality audit (docs/reuse-audit.md)." }),
      reuse_target: z
        .object({
          target: z.number().openapi({ description: "--reuse-target-agreement." }),
          min_ratio: z.number().openapi({ description: "--min-ratio." }),
          max_ratio: z.number().openapi({ description: "--max-ratio." }),
          audit_rate: z.number().openapi({ description: "Share of reused requests the audit samples for the target." }),
          cells: z
            .array(
              z.object({
                model: z.string(),
                policy: z.string(),
                ratio: z.number().openapi({ description: "The recompute ratio a request of this policy that names none gets now." }),
                samples: z.int().openapi({ description: "Audit samples taken." }),
                counted: z.int().openapi({ description: "Of them, those that said something about the current ratio (docs/reuse-target.md)." }),
                moves_up: z.int(),
                moves_down: z.int(),
                window_agreement: z.number().nullable().openapi({ description: "Mean agreement of the samples since the last move (null: none yet)." }),
              }),
            )
            .openapi({ description: "One per model and policy that takes a ratio." }),
        })
        .optional()
        .openapi({ description: "With --reuse-target-agreement: the recompute ratio set by a quality target (docs/reuse-target.md)." }),
    })
    .openapi("EngineStats");
  const savedTotals = {
    requests: z.int().openapi({ description: "Requests accounted: finished by the engine, or accepted by the upstream." }),
    prompt_tokens: z.int().openapi({ description: "Prompt tokens in the model's own tokens (the engine's count, or the upstream's usage.prompt_tokens)." }),
    cached_tokens: z.int().openapi({ description: "Prompt tokens whose KV came from a cache: the prefix cache (usage.prompt_tokens_details.cached_tokens) and, on a ctxr engine, reused chunks." }),
    recomputed_tokens: z.int().openapi({ description: "Prompt tokens of reused chunks the engine ran again to repair their KV." }),
    cached_ratio: z.number().openapi({ description: "cached_tokens / prompt_tokens (0 before any prompt)." }),
  };
  const SavedTokens = z
    .object({
      ...savedTotals,
      engine: z
        .object({
          ...savedTotals,
          prefix_cached_tokens: z.int().openapi({ description: "Of cached_tokens, those from the prefix cache." }),
          chunk_reused_tokens: z.int().openapi({ description: "Of cached_tokens, those of cached chunks reused at another position." }),
          computed_tokens: z.int().openapi({ description: "prompt_tokens − cached_tokens − recomputed_tokens." }),
        })
        .optional()
        .openapi({ description: "With --model: the built-in engine, per finished request." }),
      upstreams: z
        .array(
          z.object({
            url: z.string(),
            ...savedTotals,
            completion_tokens: z.int().openapi({ description: "Completion tokens the upstream reported (usage.completion_tokens)." }),
            unit: z.enum(["tokenizer", "estimate"]).openapi({ description: "The unit of the four figures below: the served model's tokenizer (--tokenizer) or 4 characters a token." }),
            prompt_tokens_received: z.int().openapi({ description: "Prompt tokens of the messages as clients sent them (documents field rendered)." }),
            prompt_tokens_forwarded: z.int().openapi({ description: "Prompt tokens of the messages as forwarded (history with the documents sent before, notes for repeated ones)." }),
            estimated_cached_tokens: z.int().openapi({ description: "Tokens of documents the live index expected the upstream to have cached, in the order sent." }),
            input_order_estimated_cached_tokens: z.int().openapi({ description: "The same estimate for the documents in the order the clients sent them." }),
            usage_reports: z.int().openapi({ description: "Answers whose usage report was read (streamed answers too: the proxy asks the upstream for their usage, and hides it from clients that did not ask)." }),
            cached_tokens_reports: z.int().openapi({ description: "Of those, the ones that said how many tokens were cached." }),
          }),
        )
        .optional()
        .openapi({ description: "With --upstream: per upstream, in the order given." }),
    })
    .openapi("SavedTokens", { description: "What ctxr saved: the one accounting /metrics (ctxr_saved_tokens_*, ctxr_engine_*_tokens_total, ctxr_upstream_*_tokens_total) and the --stats-interval line also read. The top-level figures add the engine's and the upstreams' own." });

  const StatsResponse = z
    .object({
      contexts: z.int(),
      nodes: z.int(),
      index_tokens: z.int(),
      distinct_blocks: z.int(),
      index_bytes: z.int().openapi({ description: "Estimated heap bytes of the live index and its block keys." }),
      index_bytes_limit: z.int().nullable().openapi({ description: "--max-index-bytes: least recently used contexts are evicted beyond it." }),
      index_budget_evicted_contexts: z.int().openapi({ description: "Contexts evicted to stay within --max-index-bytes." }),
      conversations: z.int(),
      dedup_bytes: z.int().openapi({ description: "Estimated heap bytes of the dedup conversation records." }),
      dedup_bytes_limit: z.int().nullable().openapi({ description: "--max-dedup-bytes: least recently used conversations are forgotten beyond it." }),
      dedup_budget_evicted_conversations: z.int().openapi({ description: "Conversations forgotten to stay within --max-dedup-bytes." }),
      annotation_bytes_limit: z.int().openapi({ description: "--max-annotation-bytes: the most annotation text one request may render." }),
      capacity_tokens: z.int().nullable(),
      ttl_ms: z.number().nullable(),
      reordered_contexts: z.int(),
      prompt_tokens: z.int(),
      prefix_hit_tokens: z.int(),
      estimated_prefix_hit_ratio: z.number(),
      dedup_blocks: z.int(),
      duplicate_blocks: z.int(),
      evicted_contexts: z.int(),
      persistent: z.boolean(),
      shared_state: z
        .object({
          url: z.string(),
          instance: z.string().openapi({ description: "This instance's name in the shared log." }),
          healthy: z.boolean(),
          degraded_reason: z.string().nullable(),
          last_entry: z.string().openapi({ description: "Id of the last shared-log entry applied." }),
          unsent_batches: z.int().openapi({ description: "Change batches waiting for Redis (while it is unreachable)." }),
          unsent_bytes: z.int().openapi({ description: "Bytes of those changes." }),
          queue_bytes_limit: z.int().openapi({ description: "--state-queue-bytes: past it, requests that change the state get 503 with Retry-After." }),
          unconfirmed_batches: z.int().openapi({ description: "Own change batches not yet read back from the log." }),
          snapshot_problem: z.string().nullable().openapi({ description: "Why the snapshot in Redis was unusable at the last load (the log was loaded alone), or null." }),
          recent_dead_letters: z.array(z.object({ id: z.string(), reason: z.string() })).openapi({ description: "The latest shared-log entries skipped as undecodable, with why." }),
          appended_entries: z.int(),
          appended_changes: z.int(),
          applied_entries: z.int().openapi({ description: "Other instances' log entries applied." }),
          applied_changes: z.int(),
          dropped_changes: z.int().openapi({ description: "Other instances' changes an own reset, later in the log, wiped." }),
          write_errors: z.int(),
          read_errors: z.int(),
          resyncs: z.int().openapi({ description: "Reloads from the snapshot after the log was trimmed past this replica." }),
          snapshots_written: z.int(),
          acknowledged_degraded: z.int().openapi({ description: "Changes acknowledged while Redis was unreachable (kept locally, appended when it returned)." }),
          skipped_entries: z.int().openapi({ description: "Shared-log entries skipped whole because they are not ctxr change batches (dead letters)." }),
          deleted_gaps: z.int().openapi({ description: "Times entries were found deleted from the log (XDEL) after this replica's position: read on, not reloaded." }),
          garbage_snapshots: z.int().openapi({ description: "Unusable snapshots found in Redis." }),
          refused_writes: z.int().openapi({ description: "Requests refused with 503 because the queue for Redis was full." }),
          rejected_batches: z.int().openapi({ description: "Change batches larger than Redis takes in one entry, dropped (logged)." }),
        })
        .optional()
        .openapi({ description: "With --state: the state shared with other instances through Redis." }),
      saved_tokens: SavedTokens,
      recovery: RecoveryReport.nullable(),
      upstreams: z.array(UpstreamStats).optional().openapi({ description: "With --upstream: each upstream's health and counters." }),
      proxy: z
        .object({
          history_conversations: z.int(),
          history_bytes: z.int(),
          history_bytes_limit: z.int().nullable(),
          history_budget_evicted_conversations: z.int(),
          routing_bytes: z.int().openapi({ description: "Estimated heap bytes of the routing indexes, their key table and the engines' KV-event cache mirrors." }),
          routing_bytes_limit: z.int().nullable().openapi({ description: "--max-routing-bytes (with --kv-events, half of it for the cache mirrors)." }),
          routing_budget_evicted_contexts: z.int(),
          routing_budget_evicted_mirror_blocks: z.int().openapi({ description: "Engine blocks the KV-event cache mirrors forgot to stay within their share of --max-routing-bytes." }),
          routing_key_table_restarts: z.int(),
          relaying: z.int(),
          relaying_limit: z.int(),
          refused_busy: z.int(),
        })
        .optional()
        .openapi({ description: "With --upstream: the proxy's remembered histories and routing state against their byte budgets." }),
      engine: EngineStats.optional().openapi({ description: "With --model: the engine's queue, KV blocks and first tokens." }),
      kv_remote: z
        .object({
          url: z.string().openapi({ description: "The Redis of --kv-remote (no password)." }),
          up: z.boolean().openapi({ description: "Whether the last contact worked; while false the tier is skipped and tried again every second." }),
          capacity_bytes: z.int().openapi({ description: "--kv-remote-bytes: the limit every instance of this model keeps in Redis." }),
          bytes: z.int().openapi({ description: "Bytes this model's entries take in Redis, as this instance's last write saw them." }),
          hits: z.int().openapi({ description: "Chunk-cache hits served from the remote tier." }),
          fetched: z.int().openapi({ description: "Variants fetched and kept in this instance's host or disk tier." }),
          lookups: z.int().openapi({ description: "Chunks looked up (those with no variant here)." }),
          found: z.int().openapi({ description: "Remote variants read and found good." }),
          writes: z.int().openapi({ description: "Variants written through." }),
          writes_skipped: z.int().openapi({ description: "Writes not made: already there, or larger than the limit." }),
          evicted: z.int().openapi({ description: "Variants this instance's writes evicted (least reused first) to keep the limit." }),
          discarded: z.int().openapi({ description: "Damaged or foreign entries deleted, never used." }),
          authenticated: z.boolean().openapi({ description: "Whether entries carry an HMAC-SHA256 (--kv-remote-secret)." }),
          unauthenticated: z.int().openapi({ description: "Entries deleted because their MAC was missing or wrong." }),
          failures: z.int().openapi({ description: "Operations that failed: Redis unreachable, too slow, or an error reply." }),
          skipped: z.int().openapi({ description: "Operations not tried while Redis was unreachable." }),
        })
        .optional()
        .openapi({ description: "With --model and --kv-remote: the shared remote chunk-cache tier." }),
    })
    .openapi("StatsResponse");

  const ErrorResponse = z
    .object({
      error: z.object({
        message: z.string(),
        type: z.string().openapi({
          description:
            "The kind of error, by status: invalid_request_error (400, 405, 413, 415, 422), authentication_error (401), permission_error (403), not_found_error (404), rate_limit_error (429), server_error (500, 502, 504), service_unavailable (503).",
        }),
        param: z.string().nullable().openapi({ description: 'The offending field, e.g. "messages[1].role"; null when no single field is at fault (the body as a whole included).' }),
        code: z
          .string()
          .nullable()
          .openapi({ description: 'A short machine-readable reason: "invalid_value", "invalid_type", "unknown_parameter", "missing_required_parameter", "invalid_json", "model_not_found", "context_length_exceeded", "invalid_api_key", "rate_limit_exceeded", ...' }),
        field: z.string().openapi({ description: 'ctxr\'s name for param, kept for its REST API clients: the offending field; "body" for the body as a whole, "" when no field is at fault.' }),
      }),
    })
    .openapi("Error", {
      example: { error: { message: "contexts[2][5]: expected a block", type: "invalid_request_error", param: "contexts[2][5]", code: "invalid_value", field: "contexts[2][5]" } },
    });

  return {
    Block,
    ReorderRequest,
    ScheduleRequest,
    DedupRequest,
    EvictRequest,
    ReorderResponse,
    ScheduleResponse,
    DedupResponse,
    EvictResponse,
    ResetResponse,
    HealthResponse,
    ReadyResponse,
    StatsResponse,
    ErrorResponse,
  };
}

export type ApiSchemas = ReturnType<typeof createSchemas>;
