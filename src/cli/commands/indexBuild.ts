/**
 * `ctxr index build`: reads contexts (JSONL), builds the context index, writes the
 * contexts in scheduled order with their blocks reordered, and reports prefix-cache
 * hit ratios of the schedule and of the input order.
 */
import { buildContextIndex } from "../../index/buildIndex.ts";
import type { IndexMethod, LinkageMethod, ScheduledContext } from "../../index/buildIndex.ts";
import type { BlockId, ContextSet } from "../../index/contextSet.ts";
import { checkClusterFits, ClusterTooLargeError } from "../../index/clusterMemory.ts";
import { parseContextsJsonl } from "../../index/contextsJsonl.ts";
import type { BlockObject, ContextId } from "../../index/contextsJsonl.ts";
import { simulateContextSet, simulatePrefixCache } from "../../index/prefixCacheSimulator.ts";
import {
  EXIT_OK,
  InputError,
  choiceFlag,
  integerFlag,
  numberFlag,
    requiredString,
  resolveCapacity,
  SIMULATION_ALIASES,
  SIMULATION_FLAGS,
  simulationFlags,
} from "../args.ts";
import type { FlagSpec, ParsedFlags } from "../args.ts";
import { parseSourcedFlags, withFlagSources } from "../sourcedFlags.ts";
import { checkOutputWritable, readInputText, writeFileAtomically } from "../files.ts";
import { lazyProgressBar } from "../progress.ts";
import type { CommandIo } from "./types.ts";

export const INDEX_BUILD_HELP = `Usage: ctxr index build --input contexts.jsonl --output schedule.jsonl [options]

Builds the context index of a batch of contexts: reorders each context's blocks and
schedules the contexts so that a prefix KV cache is reused as much as possible.

Input: one context a line, a JSON array of blocks, or an object {"id": ...,
"blocks": [...]}. A block is an id (an integer or a string) or, as the online API
takes it, {"id"?, "text"?, "tokens"?}: a text without an id is the block
text:<hash of its whitespace-normalized text>. Blank lines are skipped.
Output: one context a line in the scheduled order:
  {"id": <input id, else 0-based line number>, "blocks": [...reordered...], "path": [...]}
The last line on stdout is a JSON summary (contexts, build_ms, hit_ratio,
baseline_hit_ratio, method, blocks, distinct_blocks, ...).

Options:
  --input FILE             contexts, JSONL (required)
  --output FILE            schedule to write, JSONL (required; written only on success)
  --alpha A                position weight of the context distance (default 0.001)
  --linkage L              average | single | complete (default average)
  --method M               auto | cluster | trie (default auto); cluster holds an
                           N×N distance matrix in at most 4 GiB (about 32,000
                           contexts) and refuses more before it starts
  --document-tokens T      tokens of each document (block id) for the hit ratios
                           (default 256; old name --block-tokens)
  --capacity-tokens C      prefix-cache capacity for the hit ratios (default unlimited)
  --capacity-frac F        capacity as a fraction of the workload's tokens (0..1)
  --search-iterations N   extra local-search iterations: slower, may share more (default 0)
  --no-progress            no progress bar on stderr
  --config FILE            options from a JSON or YAML file (keys: the long names)
  -h, --help               this help

Every option can also be set as CTXR_<OPTION> (e.g. CTXR_DOCUMENT_TOKENS=128) or
in --config FILE; the command line wins over the environment, which wins over the file.

Exit codes: 0 success, 2 bad usage or bad input (no output written), 1 other failure.
`;

const COMMAND = "index build";

const FLAGS: FlagSpec = {
  input: { type: "string" },
  output: { type: "string" },
  alpha: { type: "string" },
  linkage: { type: "string" },
  method: { type: "string" },
  ...SIMULATION_FLAGS,
  "search-iterations": { type: "string" },
  "no-progress": { type: "boolean" },
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
};

export async function indexBuildCommand(args: string[], io: CommandIo): Promise<number> {
  const flags = parseSourcedFlags(args, FLAGS, COMMAND, process.env, SIMULATION_ALIASES);
  if (flags.values.help) {
    io.out(INDEX_BUILD_HELP);
    return EXIT_OK;
  }
  for (const note of flags.notes) process.stderr.write(note);
  return withFlagSources(flags, () => buildWithFlags(flags, io));
}

async function buildWithFlags(flags: ParsedFlags, io: CommandIo): Promise<number> {
  const input = requiredString(flags, "input", COMMAND);
  const output = requiredString(flags, "output", COMMAND);
  const alpha = numberFlag(flags, "alpha", COMMAND, 0.001, { min: 0 });
  const linkage = choiceFlag<LinkageMethod>(flags, "linkage", COMMAND, ["average", "single", "complete"], "average");
  const method = choiceFlag<IndexMethod>(flags, "method", COMMAND, ["auto", "cluster", "trie"], "auto");
  const searchIterations = integerFlag(flags, "search-iterations", COMMAND, 0) ?? 0;
  const { blockTokens, capacity } = simulationFlags(flags, COMMAND);

  const text = readInputText(input);
  const parseStart = performance.now();
  const parsed = parseContextsJsonl(text, { source: input });
  const parseMs = performance.now() - parseStart;
  const { set, ids } = parsed;
  if (method === "cluster") {
    try {
      checkClusterFits(set);
    } catch (error) {
      if (error instanceof ClusterTooLargeError) throw new InputError(error.message);
      throw error;
    }
  }
  checkOutputWritable(output);

  const totalTokens = set.flat.length * blockTokens;
  const capacityTokens = resolveCapacity(capacity, totalTokens);
  const simulation = { blockTokens, capacityTokens };
  const baseline = simulateContextSet(set, simulation);

  const progress = lazyProgressBar(io.progress && !flags.values["no-progress"]);
  const buildStart = performance.now();
  let result;
  try {
    result = await buildContextIndex(set, { alpha, linkage, method, searchIterations, onProgress: progress.onProgress });
  } finally {
    progress.stop();
  }
  const buildMs = performance.now() - buildStart;

  checkSchedule(set, result.scheduled);
  const scheduledResult = simulatePrefixCache(
    result.scheduled.map((context) => context.blocks),
    simulation,
  );

  const writeStart = performance.now();
  writeFileAtomically(output, scheduleLines(set, ids, result.scheduled, parsed.blockObjects));
  const writeMs = performance.now() - writeStart;

  const capacityText = capacityTokens === null ? "unlimited cache" : `cache of ${capacityTokens} tokens`;
  io.out(
    `ctxr: ${set.size} contexts (${set.flat.length} documents, ${set.blockIds.length} distinct) ` +
      `scheduled by ${result.method} in ${formatMs(buildMs)}; wrote ${output}\n` +
      `ctxr: prefix-cache hit ratio ${percent(scheduledResult.hitRatio)} ` +
      `(input order ${percent(baseline.hitRatio)}), ${capacityText}, ${blockTokens} tokens a document\n`,
  );
  io.out(
    JSON.stringify({
      contexts: set.size,
      blocks: set.flat.length,
      distinct_blocks: set.blockIds.length,
      method: result.method,
      build_ms: round(buildMs),
      parse_ms: round(parseMs),
      write_ms: round(writeMs),
      hit_ratio: scheduledResult.hitRatio,
      baseline_hit_ratio: baseline.hitRatio,
      hit_tokens: scheduledResult.hitTokens,
      baseline_hit_tokens: baseline.hitTokens,
      total_tokens: scheduledResult.totalTokens,
      evicted_blocks: scheduledResult.evictedBlocks,
      baseline_evicted_blocks: baseline.evictedBlocks,
      block_tokens: blockTokens,
      capacity_tokens: capacityTokens,
      alpha,
      linkage,
      requested_method: method,
      input,
      output,
    }) + "\n",
  );
  return EXIT_OK;
}

/** The output's lines, one context each, blocks as the user wrote them (an object block as first written). */
function* scheduleLines(set: ContextSet, ids: ContextId[], scheduled: ScheduledContext[], blockObjects: readonly (BlockObject | undefined)[]): Generator<string> {
  const blockIds = set.blockIds;
  for (const context of scheduled) {
    const blocks: (BlockId | BlockObject)[] = new Array(context.blocks.length);
    for (let k = 0; k < context.blocks.length; k++) blocks[k] = blockObjects[context.blocks[k]!] ?? blockIds[context.blocks[k]!]!;
    yield JSON.stringify({ id: ids[context.input], blocks, path: context.path }) + "\n";
  }
}

/** Guards the output: every input context exactly once, each a permutation of its blocks. */
function checkSchedule(set: ContextSet, scheduled: ScheduledContext[]): void {
  const fail = (problem: string): never => {
    throw new Error(`internal error: the index build returned a bad schedule (${problem})`);
  };
  if (scheduled.length !== set.size) fail(`${scheduled.length} contexts for ${set.size} inputs`);
  const placed = new Uint8Array(set.size);
  const mark = new Int32Array(set.blockIds.length);
  let stamp = 0;
  for (const context of scheduled) {
    const i = context.input;
    if (!Number.isInteger(i) || i < 0 || i >= set.size || placed[i]) fail(`context ${i} missing or repeated`);
    placed[i] = 1;
    const start = set.offsets[i]!;
    const end = set.offsets[i + 1]!;
    if (context.blocks.length !== end - start) fail(`context ${i} has ${context.blocks.length} blocks, not ${end - start}`);
    stamp++;
    for (let k = start; k < end; k++) mark[set.flat[k]!] = stamp;
    for (const block of context.blocks) {
      if (mark[block] !== stamp) fail(`context ${i}: blocks are not a permutation of its input`);
      mark[block] = 0;
    }
  }
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

function formatMs(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`;
}

function percent(ratio: number): string {
  return `${(ratio * 100).toFixed(2)}%`;
}
