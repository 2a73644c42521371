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
