/**
 * scripts/oracle/random_gguf.py --vocab N --dtype f16 (the ~1B bench files of
 * `bench-engine.ts --vs-llamacpp --arch`): a vocabulary padded with distinct ordinary tokens to N,
 * embedding and output matrices N rows long stored as F16, and the ids the chat template and
 * stop tokens use unchanged; llama.cpp loads the file and gives a log-probability per position.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import type { GgufArray } from "../../src/model/gguf/ggufMetadata.ts";
import { runProgram, tempFolder } from "../helpers/cli.ts";
import { llamaLogprobs, llamaOracle, writeRandomGguf } from "../helpers/llamaOracle.ts";

let scratch: { path: string; cleanup(): void };
beforeAll(() => {
  llamaOracle();
  scratch = tempFolder("ctxr-random-gguf-");
}, 300_000);
afterAll(() => scratch?.cleanup());

const ggmlF16 = 1;

test("--vocab pads the vocabulary with distinct ordinary tokens, --dtype f16 stores the matrices as F16", () => {
  const plain = readGgufFile(writeRandomGguf("qwen3", join(scratch.path, "plain.gguf"), { headDim: 64 }));
  const padded = readGgufFile(writeRandomGguf("qwen3", join(scratch.path, "padded.gguf"), { headDim: 64, extraArgs: ["--vocab", "1000", "--dtype", "f16"] }));
  const tokens = (padded.metadata.get("tokenizer.ggml.tokens")!.value as GgufArray).items as string[];
  const types = (padded.metadata.get("tokenizer.ggml.token_type")!.value as GgufArray).items as number[];
  const plainTokens = (plain.metadata.get("tokenizer.ggml.tokens")!.value as GgufArray).items as string[];
  expect(tokens.length).toBe(1000);
  expect(new Set(tokens).size).toBe(1000);
  expect(tokens.slice(0, plainTokens.length)).toEqual(plainTokens);
  expect(types.slice(plainTokens.length).every((t) => t === 1)).toBe(true);
  for (const key of ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"]) expect(padded.metadata.get(key)!.value).toBe(plain.metadata.get(key)!.value);
  const embedding = padded.tensors.find((t) => t.name === "token_embd.weight")!;
  const output = padded.tensors.find((t) => t.name === "output.weight")!;
  expect(embedding.dims).toEqual([256, 1000]);
  expect(output.dims).toEqual([256, 1000]);
  expect(embedding.type).toBe(ggmlF16);
  expect(padded.tensors.find((t) => t.name === "blk.0.attn_norm.weight")!.type).toBe(0);
  // llama.cpp runs it: finite log-probabilities over the whole padded vocabulary, padding ids in.
  const { rows, vocab } = llamaLogprobs(join(scratch.path, "padded.gguf"), [5, 900, 17, 999], scratch.path);
  expect(vocab).toBe(1000);
  expect(rows.length).toBe(4 * 1000);
  expect(rows.every(Number.isFinite)).toBe(true);
}, 300_000);

test("--vocab below the tokens the file needs is refused by name", () => {
  const run = runProgram(["/usr/bin/python3", join(import.meta.dir, "..", "..", "scripts", "oracle", "random_gguf.py"), "--arch", "qwen3", "--out", join(scratch.path, "small.gguf"), "--vocab", "100"], {
    env: { GGUF_PY: llamaOracle().ggufPy },
  });
  expect(run.code).not.toBe(0);
  expect(run.stderr).toContain("--vocab 100 is below the 271 tokens the file needs");
});

function metadataArray(file: ReturnType<typeof readGgufFile>, key: string): unknown[] {
  return (file.metadata.get(key)!.value as GgufArray).items as unknown[];
}

test("--vocab-type spm writes Gemma 3's and Phi-3's SentencePiece layouts, pieces ranked by score", () => {
  const gemma = readGgufFile(writeRandomGguf("gemma3", join(scratch.path, "gemma-spm.gguf"), { extraArgs: ["--vocab-type", "spm"] }));
  const phi3 = readGgufFile(writeRandomGguf("phi3", join(scratch.path, "phi3-spm.gguf"), { extraArgs: ["--vocab-type", "spm", "--name", "Phi3"] }));
  for (const file of [gemma, phi3]) {
    expect(file.metadata.get("tokenizer.ggml.model")!.value).toBe("llama");
    const tokens = metadataArray(file, "tokenizer.ggml.tokens") as string[];
    const types = metadataArray(file, "tokenizer.ggml.token_type") as number[];
    const scores = metadataArray(file, "tokenizer.ggml.scores") as number[];
    expect(new Set(tokens).size).toBe(tokens.length);
    // Every byte piece, as BYTE; a few thousand ordinary pieces of several characters, ▁ for spaces.
    const bytes = tokens.flatMap((t, id) => (types[id] === 6 ? [t] : []));
    expect(bytes).toEqual(Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`));
    const normal = tokens.flatMap((t, id) => (types[id] === 1 ? [id] : []));
    const multi = normal.filter((id) => Array.from(tokens[id]!).length > 1 && !/^▁+$/.test(tokens[id]!));
    expect(multi.length).toBeGreaterThan(2500);
    expect(multi.filter((id) => tokens[id]!.startsWith("▁")).length).toBeGreaterThan(400);
    // Merge priority: scores fall strictly with rank over the learned pieces.
    for (let i = 1; i < multi.length; i++) expect(scores[multi[i]!]!).toBeLessThan(scores[multi[i - 1]!]!);
    // Llama 2's hand-added runs of ▁ tie at -1e9.
    expect(scores[tokens.indexOf("▁▁")]).toBe(-1e9);
    expect(scores[tokens.indexOf("▁▁▁▁")]).toBe(-1e9);
  }
  const gemmaTokens = metadataArray(gemma, "tokenizer.ggml.tokens") as string[];
  const gemmaTypes = metadataArray(gemma, "tokenizer.ggml.token_type") as number[];
  expect(gemmaTokens.slice(0, 4)).toEqual(["<pad>", "<eos>", "<bos>", "<unk>"]);
  expect(gemma.metadata.get("tokenizer.ggml.bos_token_id")!.value).toBe(2);
  expect(gemma.metadata.get("tokenizer.ggml.add_space_prefix")!.value).toBe(false);
  expect(gemma.metadata.get("tokenizer.ggml.add_bos_token")!.value).toBe(true);
  expect(gemmaTypes[gemmaTokens.indexOf("<start_of_turn>")]).toBe(3);
  expect(gemmaTypes[gemmaTokens.indexOf("   ")]).toBe(4); // user-defined, ▁ written back as spaces
  expect(gemmaTokens).toContain("\n\n");
  const phiTokens = metadataArray(phi3, "tokenizer.ggml.tokens") as string[];
  expect(phiTokens.slice(0, 3)).toEqual(["<unk>", "<s>", "</s>"]);
  expect(phiTokens.some((t) => t.includes("\n"))).toBe(false); // newlines are byte pieces, as Llama 2's
  expect(phi3.metadata.has("tokenizer.ggml.add_space_prefix")).toBe(false);
  expect(phi3.metadata.get("tokenizer.ggml.eos_token_id")!.value).toBe(phiTokens.indexOf("<|endoftext|>"));
  expect(phi3.metadata.get("general.name")!.value).toBe("Phi3");
  expect(String(phi3.metadata.get("tokenizer.chat_template")!.value)).toContain("<|assistant|>");
  // llama.cpp loads it and gives log-probabilities over the whole vocabulary.
  const { rows, vocab } = llamaLogprobs(join(scratch.path, "phi3-spm.gguf"), [1, 500, 17, phiTokens.indexOf("<|end|>")], scratch.path);
  expect(vocab).toBe(phiTokens.length);
  expect(rows.every(Number.isFinite)).toBe(true);
}, 300_000);

test("--vocab-type spm for an architecture without a SentencePiece family is refused by name", () => {
  const run = runProgram(["/usr/bin/python3", join(import.meta.dir, "..", "..", "scripts", "oracle", "random_gguf.py"), "--arch", "qwen3", "--out", join(scratch.path, "qwen3-spm.gguf"), "--vocab-type", "spm"], {
    env: { GGUF_PY: llamaOracle().ggufPy },
  });
  expect(run.code).not.toBe(0);
  expect(run.stderr).toContain("no SentencePiece vocabulary for the qwen3 family (known: gemma, phi3)");
});
