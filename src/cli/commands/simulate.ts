/**
 * `ctxr simulate`: the prefix-cache hit ratio of a schedule (or any request
 * sequence), served in file order by a radix-tree cache with LRU leaf eviction.
 * Agrees exactly with shared/workloads/sim.py.
 */
import { parseContextsJsonl } from "../../index/contextsJsonl.ts";
import { simulateContextSet } from "../../index/prefixCacheSimulator.ts";
import { EXIT_OK, SIMULATION_ALIASES, SIMULATION_FLAGS, requiredString, resolveCapacity, simulationFlags } from "../args.ts";
import type { FlagSpec, ParsedFlags } from "../args.ts";
import { parseSourcedFlags, withFlagSources } from "../sourcedFlags.ts";
import { readInputText } from "../files.ts";
import type { CommandIo } from "./types.ts";

export const SIMULATE_HELP = `Usage: ctxr simulate --input schedule.jsonl [options]

Serves the requests of a JSONL file in order through a prefix KV cache (a radix
tree of block sequences, least-recently-used leaves evicted beyond the capacity)
and prints the hit ratio = cached prefix tokens / total tokens.

Input: one request a line, a JSON array of block ids or an object with a "blocks"
array (such as the output of 'ctxr index build'). Blank lines are skipped.
The last line on stdout is a JSON object: hit_ratio, hit_tokens, total_tokens,
requests, capacity_tokens (null: unlimited), evicted_blocks, block_tokens.

Options:
  --input FILE             requests, JSONL (required)
  --document-tokens T      tokens of each document (block id) (default 256; old
                           name --block-tokens)
  --capacity-tokens C      cache capacity in tokens (default unlimited)
  --capacity-frac F        capacity as a fraction of the file's tokens (0..1), as sim.py
  --config FILE            options from a JSON or YAML file (keys: the long names)
  -h, --help               this help

Every option can also be set as CTXR_<OPTION> (e.g. CTXR_DOCUMENT_TOKENS=128) or
in --config FILE; the command line wins over the environment, which wins over the file.
`;

const COMMAND = "simulate";

const FLAGS: FlagSpec = {
  input: { type: "string" },
  ...SIMULATION_FLAGS,
  config: { type: "string" },
  help: { type: "boolean", short: "h" },
};

export async function simulateCommand(args: string[], io: CommandIo): Promise<number> {
  const flags = parseSourcedFlags(args, FLAGS, COMMAND, process.env, SIMULATION_ALIASES);
  if (flags.values.help) {
    io.out(SIMULATE_HELP);
    return EXIT_OK;
  }
  for (const note of flags.notes) process.stderr.write(note);
  return withFlagSources(flags, () => simulateWithFlags(flags, io));
}

async function simulateWithFlags(flags: ParsedFlags, io: CommandIo): Promise<number> {
  const input = requiredString(flags, "input", COMMAND);
  const { blockTokens, capacity } = simulationFlags(flags, COMMAND);

  const text = readInputText(input);
  // Like sim.py: empty requests and repeated blocks are valid requests here.
  const { set } = parseContextsJsonl(text, { source: input, allowEmpty: true, allowRepeats: true });
  const capacityTokens = resolveCapacity(capacity, set.flat.length * blockTokens);

  const started = performance.now();
  const result = simulateContextSet(set, { blockTokens, capacityTokens });
  const simulateMs = performance.now() - started;

  const capacityText = capacityTokens === null ? "unlimited cache" : `cache of ${capacityTokens} tokens`;
  io.out(
    `ctxr: ${input}: hit ratio ${(result.hitRatio * 100).toFixed(2)}% ` +
      `(${result.hitTokens} of ${result.totalTokens} tokens, ${result.requests} requests), ${capacityText}\n`,
  );
  io.out(
    JSON.stringify({
      hit_ratio: result.hitRatio,
      hit_tokens: result.hitTokens,
      total_tokens: result.totalTokens,
      requests: result.requests,
      capacity_tokens: result.capacityTokens,
      evicted_blocks: result.evictedBlocks,
      block_tokens: blockTokens,
      simulate_ms: Math.round(simulateMs * 1000) / 1000,
      input,
    }) + "\n",
  );
  return EXIT_OK;
}
