/**
 * llama.cpp as the oracle (issue 29, item 5): random-weight GGUF files written by llama.cpp's own
 * gguf-py (scripts/oracle/random_gguf.py), quantized by llama.cpp's own quantizer, and the
 * log-probabilities llama.cpp and ctxr's CPU runner compute on the same file for the same ids.
 *
 * The driver and the llama.cpp sources come from tools/llama-oracle/setup.sh (run by the test
 * command's pretest step; run here too when missing, a no-op when already set up).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { sequenceRange, slidingGroupOf } from "../../src/runner/runnerProtocol.ts";
import { NO_BLOCK } from "../../src/kv/kvBlockTable.ts";
import { firstLiveBlock } from "../../src/kv/slidingWindowSpan.ts";
import { REPO_ROOT, runProgram } from "./cli.ts";
import { logSoftmaxRows } from "./logprobRows.ts";

const ORACLE_DIR = join(REPO_ROOT, "tools", "llama-oracle");
const RANDOM_GGUF = join(REPO_ROOT, "scripts", "oracle", "random_gguf.py");
const REQUANTIZE_GGUF = join(REPO_ROOT, "scripts", "oracle", "requantize_gguf.py");
const PYTHON = "/usr/bin/python3";

/** llama.cpp's llama_ftype numbers (include/llama.h) of the file types the tests make. */
export const LLAMA_FTYPES = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  Q2_K: 10,
  Q3_K_S: 11,
  Q3_K_M: 12,
  Q4_K_S: 14,
  Q4_K_M: 15,
  Q5_K_S: 16,
  Q5_K_M: 17,
  Q6_K: 18,
  IQ4_NL: 25,
  IQ4_XS: 30,
  BF16: 32,
  MXFP4: 38, // LLAMA_FTYPE_MOSTLY_MXFP4_MOE: MXFP4 experts, the rest as Q8_0
} as const;
export type LlamaFileType = keyof typeof LLAMA_FTYPES;

export interface LlamaOracle {
  /** tools/llama-oracle/build/llama-oracle */
  driver: string;
  /** llama.cpp's gguf-py of the same commit (GGUF_PY for random_gguf.py). */
  ggufPy: string;
}

let oracle: LlamaOracle | null = null;

/** The oracle, set up when it is not yet (tools/llama-oracle/setup.sh). */
export function llamaOracle(): LlamaOracle {
  if (oracle) return oracle;
  const setup = runProgram(["bash", join(ORACLE_DIR, "setup.sh")]);
  if (setup.code !== 0) throw new Error(`tools/llama-oracle/setup.sh failed (exit ${setup.code}):\n${setup.stderr}`);
  oracle = { driver: setup.stdout.trim().split("\n").at(-1)!, ggufPy: join(ORACLE_DIR, "build", "llama.cpp", "gguf-py") };
  return oracle;
}

/**
 * One of llama.cpp's own vocabulary-only files (models/ggml-vocab-NAME.gguf of its source, checked
 * out by setup.sh: "llama-spm" is Llama 2's SentencePiece vocabulary, "phi-3" Phi-3's) and the test
 * texts llama.cpp keeps beside it (NAME.gguf.inp).
 */
export function llamaVocabulary(name: "llama-spm" | "phi-3"): { file: string; texts: string[] } {
  const file = join(llamaOracle().ggufPy, "..", "models", `ggml-vocab-${name}.gguf`);
  // test-tokenizer-0.cpp's format: each text followed by "\n__ggml_vocab_test__\n".
  const separator = "\n__ggml_vocab_test__\n";
  const raw = readFileSync(`${file}.inp`, "utf8");
  const texts = raw.split(separator);
  if (raw.endsWith(separator)) texts.pop();
  return { file, texts };
}

function run(command: string[], what: string, env: Record<string, string> = {}): string {
  const result = runProgram(command, { env });
  if (result.code !== 0) throw new Error(`${what} failed (exit ${result.code}):\n${result.stderr.trim()}`);
  return result.stdout;
}

function lastLine(stdout: string): string {
  return stdout.trimEnd().split("\n").at(-1)!;
}

/** The shape options of random_gguf.py (defaults there: hidden 256, 2 layers, 4 heads, 2 KV heads, ffn 512). */
export interface RandomGgufOptions {
  seed?: number;
  hidden?: number;
  layers?: number;
  heads?: number;
  kvHeads?: number;
  headDim?: number;
  ffn?: number;
  context?: number;
  /** More random_gguf.py arguments (an architecture's own, e.g. a sliding window). */
  extraArgs?: string[];
}

/** Writes a random-weight F32 file of `arch` with llama.cpp's gguf-py (scripts/oracle/arch_<arch>.py). */
export function writeRandomGguf(arch: string, out: string, options: RandomGgufOptions = {}): string {
  const flags: [Exclude<keyof RandomGgufOptions, "extraArgs">, string][] = [
    ["seed", "--seed"], ["hidden", "--hidden"], ["layers", "--layers"], ["heads", "--heads"],
    ["kvHeads", "--kv-heads"], ["headDim", "--head-dim"], ["ffn", "--ffn"], ["context", "--context"],
  ];
  const args = [...flags.flatMap(([key, flag]) => (options[key] === undefined ? [] : [flag, String(options[key])])), ...(options.extraArgs ?? [])];
  run([PYTHON, RANDOM_GGUF, "--arch", arch, "--out", out, ...args], `random_gguf.py --arch ${arch}`, { GGUF_PY: llamaOracle().ggufPy });
  return out;
}

/** llama.cpp's llama_model_quantize of `input` to `type` (its own per-tensor mix for the K and IQ types). */
export function llamaQuantize(input: string, output: string, type: LlamaFileType): string {
  run([llamaOracle().driver, "quantize", input, output, String(LLAMA_FTYPES[type])], `llama.cpp quantize to ${type}`);
  return output;
}

/**
 * Types llama.cpp's quantizer does not put into a dense model (its MXFP4_MOE mode quantizes only
 * mixture-of-experts tensors, the rest Q8_0), written instead by llama.cpp's gguf-py quantizer.
 */
export type GgufPyType = "MXFP4";

/**
 * gguf-py's quantization (gguf/quants.py, scripts/oracle/requantize_gguf.py) of every matrix of the
 * F32 file `input` whose rows hold whole blocks of `type` (token embedding and output included).
 */
export function ggufPyQuantize(input: string, output: string, type: GgufPyType): string {
  run([PYTHON, REQUANTIZE_GGUF, input, output, "--type", type], `requantize_gguf.py --type ${type}`, { GGUF_PY: llamaOracle().ggufPy });
  return output;
}

/** Each tensor's ggml type name ("q4_K", "f32", ...), as ggml reads the file. */
export function llamaTensorTypes(file: string): Record<string, string> {
  return JSON.parse(lastLine(run([llamaOracle().driver, "tensor-types", file], `llama.cpp tensor-types of ${file}`))) as Record<string, string>;
}

/** llama.cpp's token ids of `text` (no BOS/EOS added): special tokens as plain text, and recognised. */
export function llamaTokenize(file: string, text: string, scratch: string): { plain: number[]; special: number[] } {
  const textFile = join(scratch, "oracle-text.txt");
  writeFileSync(textFile, text);
  return JSON.parse(lastLine(run([llamaOracle().driver, "tokenize", file, textFile], "llama.cpp tokenize"))) as { plain: number[]; special: number[] };
}

/** Log-probabilities at every position (positions × vocab, row-major). */
export interface LogprobRows {
  rows: Float32Array;
  vocab: number;
}

/** llama.cpp's log-softmax of every position's logits for `ids` in one decode, f32 KV cache. */
export function llamaLogprobs(file: string, ids: readonly number[], scratch: string): LogprobRows {
  const idsFile = join(scratch, "oracle-ids.txt");
  const outFile = join(scratch, "oracle-logprobs.f32");
  writeFileSync(idsFile, ids.join(","));
  const info = JSON.parse(lastLine(run([llamaOracle().driver, "logits", file, idsFile, outFile], `llama.cpp logits of ${file}`))) as { positions: number; vocab: number };
  const bytes = readFileSync(outFile);
  const rows = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4).slice();
  if (info.positions !== ids.length || rows.length !== info.positions * info.vocab) throw new Error(`llama.cpp wrote ${rows.length} log-probabilities for ${ids.length} positions of ${info.vocab}`);
  return { rows, vocab: info.vocab };
}

/**
 * ctxr's CPU runner on the same file, f32 KV cache: every position's log-softmax for `ids`. The
 * first `prefill` ids (default all) go in one forward (the prefill path); each later id is a
 * forward of its own over the cache (the decode path).
 */
export async function ctxrLogprobs(runner: string, file: string, ids: readonly number[], prefill = ids.length): Promise<LogprobRows> {
  return (await ctxrForwardRun(runner, file, ids, prefill)).logprobs;
}

/** Per layer, per position, the k experts a mixture-of-experts model's router chose (in its order). */
export type ExpertRouteRows = number[][][];

/**
 * ctxrLogprobs' run, and with `expertRoutes` the experts ctxr's router chose at every position and
 * layer (FORWARD flags bit 4).
 */
export async function ctxrForwardRun(
  runner: string,
  file: string,
  ids: readonly number[],
  prefill = ids.length,
  expertRoutes = false,
): Promise<{ logprobs: LogprobRows; routes: ExpertRouteRows }> {
  if (prefill < 1 || prefill > ids.length) throw new Error(`prefill ${prefill} is not within 1..${ids.length}`);
  const blockSize = 16;
  const blocks = Math.ceil(ids.length / blockSize);
  const runnerProcess = await RunnerProcess.start({ executable: runner, model: file, blocks: blocks + 1, blockSize, threads: 2, kvDtype: "f32" });
  try {
    const vocab = runnerProcess.info.vocab;
    const routes: ExpertRouteRows = [];
    const table = await runnerProcess.alloc(blocks);
    // A model with sliding-window layers (two KV groups) keeps their KV in a table of its own, and
    // frees its blocks as they leave the window, as the engine does (the freed blocks are handed
    // out again for later entries, so a read of one would change the logits).
    const sliding = slidingGroupOf(runnerProcess.info);
    const slidingTable: number[] = [];
    const forward = async (start: number, tokens: number[], logitRows: ArrayLike<number>) => {
      if (sliding !== null) {
        const need = Math.ceil((start + tokens.length) / blockSize) - slidingTable.length;
        if (need > 0) slidingTable.push(...(await runnerProcess.alloc(need, 1)));
      }
      const result = await runnerProcess.forward({
        sequences: [{ table, ...(sliding === null ? {} : { slidingTable }), tokens, indices: sequenceRange(start, tokens.length), logitRows }],
        ...(expertRoutes ? { expertRoutes } : {}),
      });
      const chosen = result.expertRoutes?.[0];
      if (chosen !== undefined)
        chosen.layers.forEach((experts, layer) => {
          routes[layer] ??= [];
          for (let t = 0; t < tokens.length; t++) routes[layer]![start + t] = Array.from(experts.subarray(t * chosen.k, (t + 1) * chosen.k));
        });
      if (sliding !== null) {
        const gone: number[] = [];
        for (let b = 0; b < firstLiveBlock(start + tokens.length, sliding.sliding_window, blockSize); b++)
          if (slidingTable[b] !== NO_BLOCK) {
            gone.push(slidingTable[b]!);
            slidingTable[b] = NO_BLOCK;
          }
        if (gone.length > 0) await runnerProcess.free(gone, 1);
      }
      return result;
    };
    const logits = new Float32Array(ids.length * vocab);
    const first = await forward(0, ids.slice(0, prefill), sequenceRange(0, prefill));
    logits.set(first.logits[0]!, 0);
    for (let i = prefill; i < ids.length; i++) {
      const step = await forward(i, [ids[i]!], [0]);
      logits.set(step.logits[0]!, i * vocab);
    }
    return { logprobs: { rows: logSoftmaxRows(logits, vocab), vocab }, routes };
  } finally {
    await runnerProcess.shutdown();
  }
}

/** One turn of a conversation as a chat client sends it. */
export interface ConversationTurn {
  /** The whole prompt (the client resends the history). */
  prompt: readonly number[];
  /** The ids the model generates after it, decoded into the memory (without the final end-of-generation id). */
  answer?: readonly number[];
  /** Prompt positions where user messages start (llama-server also checkpoints there). */
  userStarts?: readonly number[];
}

/** llama-server's settings the conversation mode models (its defaults when left out). */
export interface LlamaServerSettings {
  /** --swa-full: sliding-window layers keep the whole context. */
  swaFull?: boolean;
  /** --ctx-checkpoints (default 32; 0 turns them off). */
  ctxCheckpoints?: number;
  /** --checkpoint-min-step (default 8192). */
  checkpointMinStep?: number;
  /** -np (default: auto, 4 sequences with a unified KV cache). */
  parallel?: number;
  /** -c (default: the model's training context). */
  ctx?: number;
  /** Threads (default 1: the counts do not depend on it, and one thread never waits on another on a loaded machine). */
  threads?: number;
}

/** What one llama-server slot did with a turn. */
export interface LlamaConversationTurn {
  prompt: number;
  /** Prompt tokens whose memory the slot reused. */
  cached: number;
  /** Prompt tokens it processed (prompt − cached). */
  reprocessed: number;
  /** It found no way to keep the common prefix and processed the whole prompt again. */
  startedOver: boolean;
  /** The n_tokens of the context checkpoint it restored, −1 when none. */
  checkpointRestored: number;
  /** Context checkpoints held after the turn, and their bytes. */
  checkpointsHeld: number;
  checkpointBytes: number;
}

export interface LlamaConversation {
  /** The model's sliding window (0 without sliding-window layers). */
  nSwa: number;
  swaFull: boolean;
  ctxCheckpoints: number;
  turns: LlamaConversationTurn[];
}

/** The turns file of the driver's conversation mode: `PROMPT | ANSWER | USER_STARTS` a line. */
export function conversationTurnsText(turns: readonly ConversationTurn[]): string {
  return turns.map((t) => [t.prompt, t.answer ?? [], t.userStarts ?? []].map((ids) => ids.join(",")).join(" | ")).join("\n") + "\n";
}

/**
 * The conversation through one llama-server slot's prompt cache (tools/llama-oracle conversation
 * mode): per turn, how much of the prompt llama.cpp reused and how much it processed again.
 */
export function llamaConversation(file: string, turns: readonly ConversationTurn[], scratch: string, settings: LlamaServerSettings = {}): LlamaConversation {
  const turnsFile = join(scratch, "oracle-turns.txt");
  writeFileSync(turnsFile, conversationTurnsText(turns));
  const flags = [
    ...(settings.swaFull ? ["--swa-full"] : []),
    ...(settings.ctxCheckpoints === undefined ? [] : ["--ctx-checkpoints", String(settings.ctxCheckpoints)]),
    ...(settings.checkpointMinStep === undefined ? [] : ["--checkpoint-min-step", String(settings.checkpointMinStep)]),
    ...(settings.parallel === undefined ? [] : ["--parallel", String(settings.parallel)]),
    ...(settings.ctx === undefined ? [] : ["--ctx", String(settings.ctx)]),
    "--threads", String(settings.threads ?? 1),
  ];
  const out = JSON.parse(lastLine(run([llamaOracle().driver, "conversation", file, turnsFile, ...flags], `llama.cpp conversation on ${file}`))) as {
    n_swa: number;
    swa_full: boolean;
    ctx_checkpoints: number;
    turns: { prompt: number; cached: number; reprocessed: number; started_over: boolean; checkpoint_restored: number; checkpoints_held: number; checkpoint_bytes: number }[];
  };
  return {
    nSwa: out.n_swa,
    swaFull: out.swa_full,
    ctxCheckpoints: out.ctx_checkpoints,
    turns: out.turns.map((t) => ({
      prompt: t.prompt,
      cached: t.cached,
      reprocessed: t.reprocessed,
      startedOver: t.started_over,
      checkpointRestored: t.checkpoint_restored,
      checkpointsHeld: t.checkpoints_held,
      checkpointBytes: t.checkpoint_bytes,
    })),
  };
}
