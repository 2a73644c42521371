/**
 * Sliding-window attention across a conversation (issue 29, item 2): how much of each turn's prompt
 * ctxr and llama.cpp reuse on a Gemma 3-shaped model, and the KV memory ctxr holds for it.
 *
 *   npx bun scripts/bench-swa-conversation.ts [--turns 8] [--user-tokens 560] [--max-tokens 40]
 *     [--window 512] [--layers 12] [--hidden 640] [--ffn 1024] [--heads 4] [--kv-heads 1]
 *     [--head-dim 256] [--threads 2] [--edit-at-turn N] [--markers-as-text] [--sampled-answers] [--json OUT]
 *
 * The model: a random-weight gemma3 file written by llama.cpp's own gguf-py
 * (scripts/oracle/random_gguf.py; Gemma 3 270M/1B's attention shape: 4 heads, 1 KV head of 256,
 * window 512, every 6th layer global), kept in .bench/swa-conversation/. Its vocabulary holds
 * Gemma 3's turn markers <start_of_turn> and <end_of_turn> as control tokens, as a real Gemma 3
 * file does (--markers-as-text: the file without them, whose template's markers tokenize as text).
 * The conversation: `--turns` user messages of about `--user-tokens` tokens, each request the whole
 * history rendered by the file's chat template, the model's greedy answers included as a chat client
 * resends them (a random model's greedy answer repeats the prompt's last token, "\n", which the
 * template's trim drops; --sampled-answers: answers sampled at temperature 1, seed = the turn,
 * among the letters and the vocabulary's two-letter merges, so that they are text the client
 * resends and whose canonical tokenization differs from the sampled ids). --edit-at-turn N: at turn N the client also edits the last word of its first
 * message (an edited and resent chat), so the common prefix with what the caches hold ends there.
 * - ctxr: `ctxr serve --model FILE` (HTTP, one request at a time); per turn usage.prompt_tokens,
 *   usage.prompt_tokens_details.cached_tokens, usage.ctxr.prompt_tokens_computed, and from /metrics
 *   the KV blocks in use and those the prefix cache holds. KV bytes by layer kind: the runner's per-
 *   blocks × block size × bytes per token of each layer kind: the global layers' blocks from
 *   ctxr_generation_kv_blocks_used, the sliding-window layers' from
 *   ctxr_generation_kv_sliding_blocks_used (their own KV group: windows and window checkpoints).
 * - llama.cpp: the same token ids (ctxr's tokenizer and template; the counts must agree with
 *   usage.prompt_tokens) through tools/llama-oracle's conversation mode, which serves them as
 *   llama-server's prompt cache does for one slot, with llama-server's defaults (SWA cache of
 *   window × 4 sequences + n_ubatch, 32 context checkpoints) and with --swa-full.
 * A table on stdout (and --json), progress on stderr.
 */
import { mkdirSync, existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { readGgufFile } from "../src/model/gguf/ggufReader.ts";
import { gemma3LocalLayers } from "../src/model/gguf/ggufGemma3Config.ts";
import { ggufModelTokenizer } from "../src/model/gguf/ggufTokenizer.ts";
import type { ChatTemplateMessage, ModelTokenizer } from "../src/model/modelTokenizer.ts";
import { type ConversationTurn, type LlamaConversation, llamaConversation, writeRandomGguf } from "../test/helpers/llamaOracle.ts";
import { spawnServer } from "../test/server/serverKit.ts";
import { REPO, progress } from "./benchKit.ts";

const { values } = parseArgs({
  options: {
    turns: { type: "string", default: "8" },
    "user-tokens": { type: "string", default: "560" },
    "max-tokens": { type: "string", default: "40" },
    window: { type: "string", default: "512" },
    layers: { type: "string", default: "12" },
    hidden: { type: "string", default: "640" },
    ffn: { type: "string", default: "1024" },
    heads: { type: "string", default: "4" },
    "kv-heads": { type: "string", default: "1" },
    "head-dim": { type: "string", default: "256" },
    context: { type: "string", default: "8192" },
    threads: { type: "string", default: "2" },
    "edit-at-turn": { type: "string", default: "0" },
    "markers-as-text": { type: "boolean", default: false },
    "sampled-answers": { type: "boolean", default: false },
    json: { type: "string" },
  },
});
const num = (name: keyof typeof values) => Number(values[name]);
const BLOCK_SIZE = 16;
const KV_DTYPE_BYTES = 2; // `serve --model FILE.gguf` on the CPU keeps an f16 KV cache
const GEMMA3_PERIOD = 6;

// ---------------------------------------------------------------------------------------------
// The model and the conversation's text

function modelFile(): string {
  const dir = join(REPO, ".bench", "swa-conversation");
  mkdirSync(dir, { recursive: true });
  const shape = ["layers", "hidden", "ffn", "heads", "kv-heads", "head-dim", "window", "context"].map((k) => values[k as keyof typeof values]).join("-");
  const markersAsText = values["markers-as-text"] === true;
  const file = join(dir, `gemma3-${shape}${markersAsText ? "" : "-turn-tokens"}.gguf`);
  if (!existsSync(file)) {
    progress(`writing ${file}`);
    writeRandomGguf("gemma3", file, {
      layers: num("layers"), hidden: num("hidden"), ffn: num("ffn"), heads: num("heads"), kvHeads: num("kv-heads"), headDim: num("head-dim"), context: num("context"),
      extraArgs: ["--sliding-window", values.window!, ...(markersAsText ? [] : ["--special", "<start_of_turn>", "--special", "<end_of_turn>"])],
    });
  }
  return file;
}

const WORDS = "the window keeps only recent entries while global layers see every token of the conversation so far and the cache serves the next turn".split(" ");

/** A user message of about `tokens` tokens (deterministic per turn). */
function userMessage(tokenizer: ModelTokenizer, turn: number, tokens: number): string {
  const words: string[] = [`Question ${turn + 1}:`];
  let state = turn * 7919 + 1;
  while (tokenizer.encode(words.join(" ")).length < tokens) {
    state = (state * 1103515245 + 12345) % 2147483648;
    words.push(WORDS[state % WORDS.length]!);
  }
  return words.join(" ");
}

// ---------------------------------------------------------------------------------------------
// ctxr's side

interface CtxrTurn {
  promptTokens: number;
  /**
   * Tokens of turns 1..n−1 in ctxr's prompt: its prompt less the new user turn (as the canonical
   * rendering tokenizes it; ctxr's prompt may start with the ids generated before).
   */
  earlierTokens: number;
  cachedTokens: number;
  computedTokens: number;
  completionTokens: number;
  kvBlocksUsed: number;
  /** Blocks of the sliding-window layers' own KV group (windows and window checkpoints); NaN with one group. */
  slidingBlocksUsed: number;
  prefixCacheBlocks: number;
}

function metricValue(text: string, name: string): number {
  return Number(new RegExp(`^${name} (\\S+)`, "m").exec(text)?.[1] ?? Number.NaN);
}

interface ChatAnswer {
  choices: { message: { content: string } }[];
  usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens: number }; ctxr?: { prompt_tokens_computed: number } };
}

// ---------------------------------------------------------------------------------------------
// The run

const file = modelFile();
const metadata = readGgufFile(file).metadata;
const { tokenizer, addBos } = ggufModelTokenizer(metadata, file);
const promptIds = (messages: readonly ChatTemplateMessage[], addGenerationPrompt: boolean) => {
  const ids = tokenizer.encode(tokenizer.applyChatTemplate(messages, { addGenerationPrompt }));
  if (addBos && tokenizer.bosTokenId !== null && ids[0] !== tokenizer.bosTokenId) ids.unshift(tokenizer.bosTokenId);
  return ids;
};

const layers = num("layers");
const localLayers = gemma3LocalLayers(layers, GEMMA3_PERIOD).filter(Boolean).length;
const globalLayers = layers - localLayers;
const bytesPerTokenLayer = 2 * num("kv-heads") * num("head-dim") * KV_DTYPE_BYTES;
const window = num("window");

progress(`ctxr serve --model ${file}`);
const server = await spawnServer(["--model", file, "--in-memory", "--threads", values.threads!, "--block-size", String(BLOCK_SIZE)], {}, 180_000);
const servedModel = ((await (await fetch(`${server.url}/v1/models`)).json()) as { data: { id: string }[] }).data[0]!.id;
/** --sampled-answers: the letters and the two-letter merges of the vocabulary, as ids. */
const answerTokens = values["sampled-answers"] ? [..."abcdefghijklmnopqrstuvwxyz", "he", "in", "re", "on", "er", "at"].map((text) => tokenizer.encode(text)).filter((ids) => ids.length === 1).map((ids) => ids[0]!) : null;
const messages: ChatTemplateMessage[] = [];
const turns: ConversationTurn[] = [];
const ctxrTurns: CtxrTurn[] = [];
try {
  for (let t = 0; t < num("turns"); t++) {
    if (t + 1 === num("edit-at-turn")) messages[0] = { role: "user", content: `${messages[0]!.content.replace(/\s\S+$/, "")} edited` };
    const earlierCanonical = messages.length === 0 ? 0 : promptIds(messages, false).length;
    messages.push({ role: "user", content: userMessage(tokenizer, t, num("user-tokens")) });
    const prompt = promptIds(messages, true);
    const leadingBos = addBos || prompt[0] === tokenizer.bosTokenId ? 1 : 0;
    const userStarts = messages.flatMap((m, i) => (m.role === "user" ? [i === 0 ? leadingBos : promptIds(messages.slice(0, i), false).length] : []));
    const started = performance.now();
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        model: servedModel,
        messages,
        max_tokens: num("max-tokens"),
        ...(answerTokens === null ? { temperature: 0 } : { temperature: 1, seed: t + 1, allowed_token_ids: answerTokens }),
      }),
    });
    if (!response.ok) throw new Error(`turn ${t + 1}: HTTP ${response.status} ${await response.text()}`);
    const answer = (await response.json()) as ChatAnswer;
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const usage = answer.usage;
    if (usage.prompt_tokens !== prompt.length) progress(`turn ${t + 1}: ctxr's prompt has ${usage.prompt_tokens} tokens, the rendering here ${prompt.length}: llama.cpp gets the latter`);
    const content = answer.choices[0]!.message.content;
    ctxrTurns.push({
      promptTokens: usage.prompt_tokens,
      earlierTokens: usage.prompt_tokens - (prompt.length - earlierCanonical),
      cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
      computedTokens: usage.ctxr?.prompt_tokens_computed ?? usage.prompt_tokens,
      completionTokens: usage.completion_tokens,
      kvBlocksUsed: metricValue(metrics, "ctxr_generation_kv_blocks_used"),
      slidingBlocksUsed: metricValue(metrics, "ctxr_generation_kv_sliding_blocks_used"),
      prefixCacheBlocks: metricValue(metrics, "ctxr_prefix_cache_blocks"),
    });
    // llama.cpp's slot holds the answer as generated: its ids as the tokenizer reads the answer text.
    turns.push({ prompt, answer: tokenizer.encode(content), userStarts });
    messages.push({ role: "assistant", content });
    progress(`turn ${t + 1}: ${usage.prompt_tokens} prompt tokens, ${ctxrTurns.at(-1)!.cachedTokens} cached (${((performance.now() - started) / 1000).toFixed(1)} s)`);
  }
} finally {
  server.kill("SIGTERM");
  await server.exited;
}

const scratch = join(REPO, ".bench", "swa-conversation");
progress("llama.cpp: llama-server's default, then --swa-full");
const llamaDefault: LlamaConversation = llamaConversation(file, turns, scratch, { threads: num("threads") });
const llamaSwaFull: LlamaConversation = llamaConversation(file, turns, scratch, { swaFull: true, threads: num("threads") });

// ---------------------------------------------------------------------------------------------
// The table

const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(2);
const lines = [
  `Gemma 3-shaped random model: ${layers} layers (${globalLayers} global, ${localLayers} sliding-window of ${window}), hidden ${values.hidden}, ${values.heads} heads, ${values["kv-heads"]} KV head(s) of ${values["head-dim"]}; ${bytesPerTokenLayer} KV bytes per token and layer (f16)`,
  "",
  "| turn | prompt | ctxr cached | ctxr computed | cached / previous prompt+answer | cached / turns 1..n−1 as resent | llama.cpp default: cached / re-processed | llama.cpp --swa-full: cached / re-processed | ctxr KV blocks (prefix cache) | ctxr KV MiB global / sliding | sliding window bound MiB |",
  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
];
const rows = ctxrTurns.map((c, i) => {
  const d = llamaDefault.turns[i]!;
  const f = llamaSwaFull.turns[i]!;
  const previous = i === 0 ? 0 : ctxrTurns[i - 1]!.promptTokens + ctxrTurns[i - 1]!.completionTokens;
  const heldTokens = c.kvBlocksUsed * BLOCK_SIZE;
  const row = {
    turn: i + 1,
    prompt: c.promptTokens,
    ctxr_cached: c.cachedTokens,
    ctxr_computed: c.computedTokens,
    ctxr_cached_share_of_previous: i === 0 ? null : c.cachedTokens / previous,
    ctxr_cached_share_of_earlier_turns: i === 0 ? null : c.cachedTokens / c.earlierTokens,
    llama_default: { cached: d.cached, reprocessed: d.reprocessed, started_over: d.startedOver, checkpoint_restored: d.checkpointRestored, checkpoint_bytes: d.checkpointBytes },
    llama_swa_full: { cached: f.cached, reprocessed: f.reprocessed, started_over: f.startedOver },
    ctxr_kv_blocks_used: c.kvBlocksUsed,
    ctxr_prefix_cache_blocks: c.prefixCacheBlocks,
    ctxr_kv_bytes_global: heldTokens * bytesPerTokenLayer * globalLayers,
    // With two KV groups the sliding layers' blocks are their own pool's; with one, every block holds every layer.
    ctxr_kv_bytes_sliding: (Number.isNaN(c.slidingBlocksUsed) ? heldTokens : c.slidingBlocksUsed * BLOCK_SIZE) * bytesPerTokenLayer * localLayers,
    ctxr_sliding_blocks_used: c.slidingBlocksUsed,
  };
  const percent = (share: number | null) => (share === null ? "—" : `${(100 * share).toFixed(1)}%`);
  const share = `${percent(row.ctxr_cached_share_of_previous)} | ${percent(row.ctxr_cached_share_of_earlier_turns)}`;
  lines.push(
    `| ${row.turn} | ${row.prompt} | ${row.ctxr_cached} | ${row.ctxr_computed} | ${share} | ${d.cached} / ${d.reprocessed}${d.startedOver ? " (started over)" : d.checkpointRestored >= 0 ? ` (checkpoint ${d.checkpointRestored})` : ""} | ${f.cached} / ${f.reprocessed} | ${c.kvBlocksUsed} (${c.prefixCacheBlocks}) | ${mib(row.ctxr_kv_bytes_global)} / ${mib(row.ctxr_kv_bytes_sliding)} | ${mib(window * bytesPerTokenLayer * localLayers)} |`,
  );
  return row;
});
const twoGroups = ctxrTurns.every((c) => !Number.isNaN(c.slidingBlocksUsed));
lines.push(
  "",
  twoGroups
    ? "ctxr's KV MiB: the global layers' blocks in use and the sliding-window layers' own group's (the running window plus the window checkpoints the prefix cache keeps for later turns), from /metrics."
    : "ctxr runs one KV group here: every block holds every layer, so the sliding layers hold every position.",
  `llama.cpp default: ${llamaDefault.ctxCheckpoints} context checkpoints per slot; after the last turn it holds ${llamaDefault.turns.at(-1)!.checkpointsHeld} of them, ${mib(llamaDefault.turns.at(-1)!.checkpointBytes)} MiB.`,
);
console.log(lines.join("\n"));
if (values.json !== undefined) writeFileSync(values.json, JSON.stringify({ model: file, window, layers, global_layers: globalLayers, local_layers: localLayers, rows }, null, 2));
