/** `ctxr serve --help`: the three modes, examples, and every option grouped by mode. */
import { DEFAULT_CLIENT_STALL_MS, DEFAULT_MAX_UPSTREAM_REQUESTS, DEFAULT_UPSTREAM_TIMEOUT_MS } from "../../proxy/contextProxy.ts";
import { DEFAULT_ENTROPY_THRESHOLD, DEFAULT_TRIGGER_WINDOW, DEFAULT_VARENTROPY_THRESHOLD, MAX_TRIGGER_WINDOW } from "../../kv/uncertaintyTrigger.ts";
import { DEFAULT_ANCHOR_TOKENS, DEFAULT_SPARSE_ANCHOR, MAX_ANCHOR_TOKENS } from "../../kv/sparseAnchor.ts";
import { DEFAULT_REFINE_FACTOR, DEFAULT_REFINE_LOOKBACK, MAX_REFINE_FACTOR, MAX_REFINE_LOOKBACK } from "../../kv/sparseTokenRefinement.ts";
import { DEFAULT_GRAMMAR_LIMITS } from "../../engine/grammar/grammarBudget.ts";
import { DEFAULT_HANDSHAKE_TIMEOUT_MS, DEFAULT_MAX_PEERS } from "../../zmq/zmqSockets.ts";
import { DEFAULT_HOST, DEFAULT_PORT } from "../../server/serve.ts";
import { DEFAULT_BUDGETS } from "../../online/stateBudgets.ts";
import { DEFAULT_KV_EVENT_MAX_BYTES } from "../../proxy/kvEventSubscriber.ts";
import { DEFAULT_LIMITS } from "../../http/limits.ts";
import { DEFAULT_MAX_WAITING } from "../../engine/schedulerTypes.ts";
import { DEFAULT_BACKGROUND_BUDGET } from "../../engine/backgroundWork.ts";
import { DEFAULT_AUDIT_TOKENS, DEFAULT_AUDIT_WARN_BELOW } from "../../engine/reuseAudit.ts";
import { DEFAULT_MAX_RATIO, DEFAULT_MIN_RATIO, DEFAULT_TARGET_AUDIT_RATE } from "../../engine/reuseTarget.ts";
import { DEFAULT_PROBE_INTERVAL_MS } from "../../proxy/upstreamMonitor.ts";
import { DEFAULT_STATS_INTERVAL_MS } from "../../server/statsLog.ts";
import { DEFAULT_STATUS_SAMPLE_EVERY_MS, DEFAULT_STATUS_SAMPLES } from "../../server/statusPage/statusHistory.ts";
import { ENGINES } from "../../proxy/engineRequestId.ts";

export const DEFAULT_DATA_DIR = "./ctxr-data";

/** A default size in help, in the unit style every size takes: 8 MiB, 1 GiB. */
function bytes(count: number): string {
  for (const [unit, size] of [["GiB", 1024 ** 3], ["MiB", 1024 ** 2], ["KiB", 1024]] as const) {
    if (count >= size && count % size === 0) return `${count / size} ${unit}`;
  }
  return `${count} B`;
}

export const SERVE_HELP = `Usage: ctxr serve [options]                         the context-reuse API
       ctxr serve --upstream URL [options]          a proxy in front of vLLM, SGLang,
                                                    llama.cpp or an OpenAI-compatible API
       ctxr serve --model FILE.gguf|DIR [options]   a built-in engine (OpenAI-compatible)

One HTTP server, three modes. Every mode serves the context-reuse API (POST
/v1/reorder, /v1/schedule, /v1/dedup, /v1/evict, /v1/reset; GET /v1/stats),
GET /healthz, /health, /ready, /metrics (Prometheus) and /openapi.json. --upstream adds
the OpenAI routes, rewritten on the way to the engines; --model adds them served
by the bundled model runner. When ready it prints
'ctxr serve: listening on http://HOST:PORT (data: DIR|memory)'. SIGINT or SIGTERM
stop it gracefully (requests in flight finish, state is saved).

Examples:
  ctxr serve --in-memory                          the reorder API on 127.0.0.1:8765
  ctxr serve --upstream http://127.0.0.1:8000 --engine vllm --in-memory
  ctxr serve --model qwen2.5-0.5b-instruct-q4_k_m.gguf --in-memory
  CTXR_PORT=9000 ctxr serve --config ctxr.yaml    options from the environment and a file

Every option can also be set as CTXR_<OPTION> (the long name in upper snake
case: CTXR_PORT=9000, CTXR_IN_MEMORY=1, CTXR_UPSTREAM="URL1 URL2", CTXR_API_KEY,
CTXR_UPSTREAM_KEY) or in a JSON or YAML file given with --config FILE (or
CTXR_CONFIG; keys are the long names: "port: 9000", "in-memory: true", "upstream:
[URL1, URL2]"). The command line wins over the environment, the environment over
the file, the file over the default. Sizes take B, KiB, MiB, GiB (8MiB, 1GiB).

Common options (every mode):
  --host HOST              address to listen on (default ${DEFAULT_HOST})
  --port PORT              port (default ${DEFAULT_PORT}; 0 picks a free one)
  --config FILE            read options from FILE (JSON, or YAML for other names)
  --data-dir DIR           state directory (default ${DEFAULT_DATA_DIR}, created only when
                           the first change is written to it); every acknowledged
                           change is journaled there (fsync'd before the answer)
                           and restored at the next start
  --in-memory              keep state in memory only (nothing survives a restart)
  --log-level L            info (default) or debug: also the tuning details at
                           start (with --model: the papers' knobs and the sparse
                           decode trigger's thresholds)
  --stats-interval S       every S seconds with traffic, print one line of what ctxr
                           saved: prompt tokens, cached, recomputed (default
                           ${DEFAULT_STATS_INTERVAL_MS / 1000}; 0: never; docs/saved-tokens.md)
  --status-sample-interval S
                           sample the status page's figures (GET /,
                           /v1/stats/history) every S seconds, keeping the last
                           ${DEFAULT_STATUS_SAMPLES} (default ${DEFAULT_STATUS_SAMPLE_EVERY_MS / 1000}; 0.1 to 3600; docs/status-page.md)
  --state redis://HOST:PORT[/DB]
                           share the state (live index, conversations, request ids,
                           proxy histories) with every instance given the same URL,
                           through Redis or Valkey, instead of a data directory
                           (README "Running several instances")
  --state-prefix P         key prefix in Redis (default ctxr:state)
  --state-snapshot-every N shared-log entries between snapshots in Redis (default 10000)
  --state-reads log|local  log (default): a request first applies what other instances
                           have acknowledged (one Redis round trip); local: answer from
                           this instance's replica as it is
  --state-queue-bytes B    changes kept in memory while Redis is unreachable (default
                           64 MiB); past it, requests that change the state get 503
                           with Retry-After
  --redis-ca FILE          PEM CA certificate(s) that signed the TLS certificate of a
                           rediss:// --state or --kv-remote (default: the system's)
  --api-key KEY            require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on
                           POST routes (also CTXR_API_KEY; default none: open)
  --max-body-bytes B       largest request body (default ${bytes(DEFAULT_LIMITS.maxBodyBytes)})
  -h, --help               this help

Context-reuse API (every mode; in /v1/reorder a context is a list of documents):
  --capacity-tokens C      evict least-recently-used contexts beyond C cached tokens
                           (default unlimited: the engine reports evictions)
  --ttl-seconds S          evict contexts unused for S seconds (default never)
  --document-tokens T      tokens of a document given without "tokens" or "text"
                           (default 256; old name --block-tokens)
  --max-contexts N         contexts per request (default ${DEFAULT_LIMITS.maxContexts})
  --max-documents N        documents per context (default ${DEFAULT_LIMITS.maxBlocks}; old name --max-blocks)

Limits on what clients can make the server hold (the state budgets are estimated
heap bytes, least recently used entries are evicted beyond them, and 0 means
unlimited; see README "Limits and hardening"):
  --max-index-bytes B      live index: contexts, ids, document keys (default ${bytes(DEFAULT_BUDGETS.indexBytes)})
  --max-dedup-bytes B      dedup conversation records (default ${bytes(DEFAULT_BUDGETS.dedupBytes)})
  --max-annotation-bytes B annotation text one request may render (default ${bytes(DEFAULT_BUDGETS.annotationBytes)})
  --max-template-placeholders N
                           times a template may repeat its placeholder (default ${DEFAULT_LIMITS.maxTemplatePlaceholders})

Proxy (--upstream): in front of OpenAI-compatible engines (vLLM, SGLang,
llama.cpp, hosted APIs):
  --upstream URL           forward to this engine (repeat for several; cache-aware
                           routing picks the one most likely to hold a request's
                           prefix). POST /v1/chat/completions and /v1/completions are
                           rewritten (documents reordered, deduplicated, annotated);
                           every other /v1/* request passes through unchanged
  --upstream-key KEY       send 'Authorization: Bearer KEY' upstream (also
                           CTXR_UPSTREAM_KEY; never shown in answers or logs)
  --engine E               auto|${ENGINES.join("|")}: the request-id field to set
                           (vllm: request_id, sglang: rid; openai: none); auto
                           (default) detects each upstream's engine from its own
                           endpoints (vLLM's /version, SGLang's /get_model_info,
                           llama.cpp's /props), logs what it found, falls back to
                           openai, and detects again when an upstream comes back
  --probe-interval S       seconds between checks of every upstream's /v1/models
                           (GET /ready: 503 while none serves) (default ${DEFAULT_PROBE_INTERVAL_MS / 1000})
  --upstream-timeout S     seconds to wait for an upstream's response headers
                           (default ${DEFAULT_UPSTREAM_TIMEOUT_MS / 1000})
  --document-template T    how a "documents" entry is rendered: {id}, {title}, {text}
                           (default an XML <document id=.. title=..> element)
  --max-upstream-requests N
                           answers the proxy relays at once; beyond, 429 with
                           Retry-After (default ${DEFAULT_MAX_UPSTREAM_REQUESTS})
  --client-stall-seconds S a client that reads nothing of an answer for S seconds
                           is cut off (default ${DEFAULT_CLIENT_STALL_MS / 1000}; 0: never)
  --max-history-bytes B    the proxy's remembered histories (default ${bytes(DEFAULT_BUDGETS.historyBytes)})
  --max-routing-bytes B    the proxy's routing indexes and KV-event cache mirrors
                           (default ${bytes(DEFAULT_BUDGETS.routingBytes)})
  --kv-events E            follow an upstream's KV events (vLLM's or SGLang's
                           --kv-events-config publisher, or ctxr serve --model's
                           --kv-events-publish): one per --upstream, in the same
                           order, each tcp://HOST:PORT (its ZeroMQ PUB socket),
                           optionally followed by ,replay=tcp://HOST:PORT (its
                           replay socket) and ,topic=T; 'none' for an upstream
                           that publishes none
  --kv-events-max-bytes B  --kv-events: a larger payload is skipped unread and
                           counted as malformed (oversized) (default ${bytes(DEFAULT_KV_EVENT_MAX_BYTES)});
                           each engine's cache mirror takes its share of half
                           of --max-routing-bytes (~230 bytes a KV block)
  --routing M              auto (default: by the engines' KV events where every
                           candidate's are live, else by the estimate),
                           estimate, or round-robin (a baseline)
  --kv-overlap-weight W    routing by KV events: the weight of a prompt's KV blocks
                           not cached on an engine against the KV blocks of the
                           prompts in flight there (default 8; Dynamo's is 1,
                           which sends requests away from their cached
                           prefixes under load; higher holds them there
                           more, lower spreads load more)
  --tokenizer DIR          the served model's folder (tokenizer.json, chat
                           template): with --kv-events, prompts are tokenized as
                           the engines do, so requests go where their KV blocks
                           really are and contexts leave when the engine drops
                           their KV blocks
  --block-size T           tokens per KV block of the engines, until their KV
                           events tell it (default 16)

Engine (--model): built-in generation, OpenAI-compatible (POST /v1/chat/completions,
/v1/completions, /v1/responses, GET /v1/models; continuous batching on the
native model runner):
  --model DIR|FILE.gguf|hf:ORG/REPO[:QUANT|FILE][@REV]
                           serve this Hugging Face model folder (config.json,
                           *.safetensors, tokenizer.json, tokenizer_config.json),
                           this GGUF file (tokenizer and chat template from its
                           metadata; of a split one, its first part), a folder
                           holding one GGUF model, or a model on the Hugging Face
                           Hub by name, downloaded into $XDG_CACHE_HOME/ctxr/models
                           once (see 'ctxr model pull --help'; HF_TOKEN, HF_ENDPOINT)
  --offline                with --model hf:...: only the cache, no download (also
                           CTXR_OFFLINE=1 or HF_HUB_OFFLINE=1)
  --device D               cpu (default), cuda or cuda:N
  --threads N              CPU threads of the runner (default: all cores)
  --served-model-name ID   the model's id in the API (default: the folder's name,
                           the GGUF file's name without .gguf, or ORG/REPO)
  --kv-blocks N            KV blocks of the runner's KV cache (default: 8,192
                           tokens' worth)
  --block-size T           tokens per KV block: 16 (default) or 32
  --kv-sliding-blocks N    a model with sliding-window layers (Gemma 3): KV blocks
                           of their KV group, which holds only each sequence's
                           window and window checkpoints (default: --kv-blocks)
  --kv-dtype K             the runner's KV cache: f32, f16 (half the memory and
                           faster decode on the CPU, K/V rounded to half) or auto
                           (default: f16 for a GGUF model on the CPU, else f32;
                           the CUDA runner keeps f32)
  --max-waiting-requests N requests that may wait for the engine at once (each
                           choice of "n" counts); beyond, 429 with Retry-After
                           (default ${DEFAULT_MAX_WAITING})
  --request-timeout S      cancel a generation request not finished S seconds
                           after it arrived, freeing its KV blocks: 504, or an
                           error event when streamed (default: none; a request's
                           "ctxr": {"deadline_ms"} may set a shorter one)
  --max-response-bytes B   stored /v1/responses responses (default ${bytes(DEFAULT_BUDGETS.responseBytes)})
  --no-prefix-cache        do not keep plain prompts' full KV blocks for later
                           requests (automatic prefix caching is on by default)
  --tool-call-parser F     how the model writes tool calls: hermes, llama3_json,
                           mistral or harmony (gpt-oss) (default: detected from
                           the chat template)
  --reasoning-parser P     how the model writes its reasoning, returned apart as
                           reasoning_content: qwen3, deepseek_r1 or gpt-oss
                           (alias harmony: the analysis channel), auto
                           (default: detected from the chat template) or none
                           (the reasoning stays in the content)
  --max-grammar-step-ms MS structured outputs: the longest one token's grammar
                           mask may take; past it the request ends with a 400
                           (an error event when streamed), the others go on
                           (default ${DEFAULT_GRAMMAR_LIMITS.stepMs})
  --max-grammar-compile-ms MS  the longest a grammar (a schema, regex, grammar,
                           tool list) may take to compile; past it, 400
                           (default ${DEFAULT_GRAMMAR_LIMITS.compileMs})
  --max-grammar-tools N    most tools a tool call may be constrained to; more,
                           400 (default ${DEFAULT_GRAMMAR_LIMITS.maxTools})
  --kv-events-publish E    publish the prefix cache's changes (BlockStored,
                           BlockRemoved, AllBlocksCleared) as vLLM does, on a
                           ZeroMQ PUB socket bound at E: tcp://HOST:PORT (HOST *:
                           every interface; PORT 0: a free one), optionally
                           followed by ,replay=tcp://HOST:PORT (a ROUTER socket
                           answering replay requests), ,topic=T (default empty),
                           ,hashes=bytes (default: 16 raw bytes) or int (the low 64
                           bits) and ,layout=map (default: vLLM main's), array
                           (SGLang's) or mixed (released vLLM's)
  --kv-events-max-connections N
                           connections each KV event socket holds at once; one
                           more is closed as it comes (default ${DEFAULT_MAX_PEERS})
  --kv-events-handshake-timeout S
                           a connection that has not completed the ZeroMQ
                           handshake S seconds after connecting is closed
                           (default ${DEFAULT_HANDSHAKE_TIMEOUT_MS / 1000})
  The runner is $CTXR_RUNNER, else cuda/build/ctxr-runner-{cpu,cuda} of the source
  tree (built with make when missing), else the one inside this binary.

Engine: KV-cache managed generation (requests with "documents" or "segments";
every document's KV is cached and reused at any position; README glossary:
CacheCraft, ProphetKV, CHESS):
  --kv-policy P            prophet (default), cachecraft, epic, none, prefix or
                           full; a request's "ctxr": {"policy"} overrides it
  --recompute-ratio R      share of reused tokens to recompute, 0..1 (default 0.2)
  --kv-device-blocks N     KV blocks the chunk cache may keep in the runner
                           (default: a quarter of --kv-blocks)
  --kv-host-bytes B        chunk caches kept in this process's memory (default 1 GiB)
  --kv-dir DIR             a disk tier for chunk caches (kept across restarts)
  --kv-disk-bytes B        capacity of --kv-dir (default 16 GiB)
  --kv-remote URL          a remote tier shared by every instance serving the same
                           model: redis://HOST:PORT[/DB]; looked up after host and
                           disk, written through in the background, skipped while
                           unreachable
  --kv-remote-bytes B      what --kv-remote may hold for this model, kept by Redis
                           for all instances (default 4 GiB; least reused evicted)
  --kv-remote-secret S     authenticate --kv-remote entries with HMAC-SHA256 under S
                           (at least 16 bytes; the same on every instance); without
                           it, anyone who can write to that Redis can steer answers
  --kv-remote-secret-file FILE
                           the same, the secret read from FILE
  --reuse-scoring-budget F share of wall time, 0..1, the engine's idle-time work
                           (measuring each stored chunk's KV shift) may keep the
                           runner busy over a 10 s window (default ${DEFAULT_BACKGROUND_BUDGET}; 0: off,
                           chunks stay unscored); live requests always go first
  --reuse-scoring M        idle (default): shift measured in the idle time; sync:
                           in the storing request, between its first and second
                           token (benchmarks that need every shift at once)
  --reuse-audit-rate R     live quality audit: share, 0..1, of the requests served
                           with reused chunks (any policy but full and prefix) whose
                           answer is compared with full prefill of the same prompt,
                           in the idle time within --reuse-scoring-budget (default 0:
                           off); figures in /metrics and /v1/stats engine.reuse_audit
  --reuse-audit-tokens N   greedy tokens the audit compares (default ${DEFAULT_AUDIT_TOKENS})
  --reuse-audit-warn-below A
                           log a warning when a model/policy/ratio's agreement over
                           its last 20 audits falls below A, and when it recovers
                           (default ${DEFAULT_AUDIT_WARN_BELOW})
  --reuse-target-agreement A
                           set the recompute ratio per policy from the live
                           audit's agreement with full prefill, 0 < A <= 1 (default
                           off): up at once when it falls below A, down slowly;
                           a request's own recompute_ratio still wins. Turns the
                           audit on at ${DEFAULT_TARGET_AUDIT_RATE} of reused requests unless
                           --reuse-audit-rate says otherwise (docs/reuse-target.md)
  --min-ratio R            the lowest ratio the target may set (default ${DEFAULT_MIN_RATIO})
  --max-ratio R            the highest ratio the target may set (default ${DEFAULT_MAX_RATIO})
  --focus-window L         Cache-Craft focused-chunk early stop after L stable
                           layers (default 0: off)
  --prophet-span-decay D   prophet: share of a token's score that carries on to
                           the next token of its chunk, 0..1 (default 0.8; 0 is
                           the paper: the question's attention alone)
  --prophet-query-rows R   prophet: whose attention scores the tokens, all of the
                           question's tokens (default, the paper) or its last one
  --prophet-scores S       prophet: what ranks the reused tokens: product (default:
                           the question's attention × each chunk's measured KV
                           shift), attention (the paper), shift, rank-sum or
                           shift-gated (docs/reuse-policies.md)
  --context-scores S       what cachecraft's token ranking, chunk budget split and
                           the variant choice use: shift (default: each stored
                           chunk's measured KV shift against the chunk alone) or
                           attention (the paper's attention-mass scores)

Engine: sparse decode (a request's "ctxr": {"kv_budget": F}) selects the KV blocks
it reads again when the model turns unsure: when the mean entropy or varentropy
of the next-token distribution over the last N decode steps is above its
threshold. Calibrate the three for your model with 'ctxr model calibrate-sparse'.
  --sparse-entropy-threshold X     entropy threshold, nats (default ${DEFAULT_ENTROPY_THRESHOLD})
  --sparse-varentropy-threshold X  varentropy threshold, nats² (default ${DEFAULT_VARENTROPY_THRESHOLD})
  --sparse-trigger-window N        decode steps averaged, 1..${MAX_TRIGGER_WINDOW} (default ${DEFAULT_TRIGGER_WINDOW})
  --sparse-anchor A                what blocks are ranked against: newest (the
                                   newest tokens' keys), newest-centered (the same
                                   less the mean block key) or window (the local
                                   window's mean key, centered) (default ${DEFAULT_SPARSE_ANCHOR})
  --sparse-anchor-tokens N         newest tokens averaged, 1..${MAX_ANCHOR_TOKENS} (default ${DEFAULT_ANCHOR_TOKENS})
  --sparse-refine N                rank the best N × budget blocks again by their
                                   best token, 0..${MAX_REFINE_FACTOR} (default ${DEFAULT_REFINE_FACTOR}; 0: by mean key only)
  --sparse-refine-lookback T       a match in a block's last T tokens ranks the
                                   next block too, 0..${MAX_REFINE_LOOKBACK}, at most a block (default ${DEFAULT_REFINE_LOOKBACK})

Exit codes: 0 after a graceful stop, 2 bad usage, 1 failure (port in use, data
directory locked by another server or unreadable, model not loadable).
`;
