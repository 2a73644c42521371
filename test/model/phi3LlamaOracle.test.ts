/**
 * Phi-3 folders through `ctxr model quantize`, against llama.cpp (the shared oracle,
 * test/helpers/llamaOracle.ts; the llama.cpp-written phi3 files are rows of test/model/llamaOracle.test.ts):
 * - ctxr's q4_k_m of a Phi-3 folder has llama.cpp's Q4_K_M types tensor for tensor (fused
 *   attn_qkv counted as attn_v);
 * - a Phi-3 folder with LongRoPE and partial rotary, converted by ctxr, loads in llama.cpp and
 *   gives ctxr's log-probabilities.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { ctxrLogprobs, llamaLogprobs, llamaQuantize } from "../helpers/llamaOracle.ts";
import { pseudoRandomIds, rowsDifference } from "../helpers/logprobRows.ts";
import { phi3FolderFromLlama } from "../helpers/phi3Folder.ts";

setDefaultTimeout(300_000);

const POSITIONS = 300;

describe("Phi-3 folders converted by ctxr, against llama.cpp", () => {
  const scratch = tempFolder("ctxr-phi3-oracle-");
  let executable = "";
  beforeAll(() => {
    executable = process.env.CTXR_TEST_RUNNER ?? buildRunner();
  }, 300_000);
  afterAll(() => scratch.cleanup());

  test("ctxr model quantize --type q4_k_m gives a Phi-3 folder llama.cpp's Q4_K_M types, tensor for tensor (attn_qkv as attn_v)", async () => {
    const llama = tinyModelFolder({ seed: 6, hidden: 256, heads: 4, kvHeads: 2, intermediate: 512, layers: 8 }, "tiny-phi3-mix");
    try {
      const folder = phi3FolderFromLlama(llama.path, join(scratch.path, "mix-folder"));
      const [ours, f32, theirs] = ["ours-q4km", "f32", "llama-q4km"].map((name) => join(scratch.path, `mix-${name}.gguf`));
      await quantizeModel({ input: folder, output: ours!, type: "q4_k_m" });
      await quantizeModel({ input: folder, output: f32!, type: "f32" });
      llamaQuantize(f32!, theirs!, "Q4_K_M");
      const types = (file: string) => Object.fromEntries(readGgufFile(file).tensors.map((t) => [t.name, t.typeInfo.name]));
      const expected = types(theirs!);
      expect(types(ours!)).toEqual(expected);
      // Not vacuous: the mix has Q6_K attn_qkv in llama.cpp's more-bits layers and Q4_K elsewhere.
      expect(expected["blk.0.attn_qkv.weight"]).toBe("Q6_K");
      expect(expected["blk.1.attn_qkv.weight"]).toBe("Q4_K");
    } finally {
      llama.cleanup();
    }
  });

  test("a Phi-3 folder (LongRoPE, partial rotary) converted by ctxr model quantize: llama.cpp loads it and agrees", async () => {
    const llama = tinyModelFolder({ seed: 5, hidden: 64, heads: 4, kvHeads: 2, intermediate: 96, layers: 2 }, "tiny-phi3-oracle");
    try {
      // The folder's name must not contain "phi3": llama.cpp then expects SentencePiece specials (</s>).
      const folder = phi3FolderFromLlama(llama.path, join(scratch.path, "converted-folder"), {
        partial_rotary_factor: 0.75,
        max_position_embeddings: 4096,
        original_max_position_embeddings: 64,
        rope_scaling: { type: "longrope", long_factor: [1, 1.5, 2.5, 4, 8, 16], short_factor: [1, 1.1, 1.2, 1.3, 1.4, 1.5] },
      });
      const gguf = join(scratch.path, "converted.gguf");
      await quantizeModel({ input: folder, output: gguf, type: "f32" });
      const ids = pseudoRandomIds(POSITIONS, 250, 7); // the tiny byte vocabulary has 259 tokens
      const llamaRows = llamaLogprobs(gguf, ids, scratch.path);
      const ours = await ctxrLogprobs(executable, gguf, ids);
      const error = rowsDifference(ours.rows, llamaRows.rows, llamaRows.vocab);
      console.log(`converted Phi-3 folder: F32 max ${error.max.toExponential(2)} mean ${error.mean.toExponential(2)}`);
      // Measured (next-token log-probabilities) max 4.9e-3, rising with position (llama.cpp's float
      // rotary angles), mean 5.5e-4; here over the whole vocabulary.
      expect(error.max).toBeLessThan(1e-2);
      expect(error.mean).toBeLessThan(1.5e-3);
    } finally {
      llama.cleanup();
    }
  });
});
