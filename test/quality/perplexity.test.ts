/**
 * src/quality/perplexity.ts: the log-softmax and the documents it scores, the runner's f32
 * NLL against the reference Llama on the same tokens, and the committed quality model
 * quantized to Q8_0 by `ctxr model quantize`'s code: its perplexity on a short held-out text
 * within 2% of f32's (measured: 0.02%), at prefill (one forward a document) and in decode-sized
 * chunks, so a broken quantized kernel fails here. Q4_0, the one type that quantizes every
 * matrix of this hidden-128 model to 4 bits, within 5%. A Q8_0 file damaged the way a kernel
 * that drops one product a block would compute fails the 2% bound (the bound can fail).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { readGgufFile } from "../../src/model/gguf/ggufReader.ts";
import { GGML_TYPE } from "../../src/model/gguf/ggufTypes.ts";
import { resolveModelSource } from "../../src/model/modelSource.ts";
import { referenceLlama, referenceLogits } from "../../src/model/referenceLlama.ts";
import { readSafetensors } from "../../src/model/safetensors.ts";
import { loadSourceTokenizer } from "../../src/model/sourceTokenizer.ts";
import { documentNll, exampleDocument, heldOutExamples, perplexity, textWindows, tokenNll, type PerplexityDocument } from "../../src/quality/perplexity.ts";
import { RunnerProcess } from "../../src/runner/runnerProcess.ts";
import { REPO_ROOT, tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";

// About 5 s on a quiet 2-core machine; the timeouts leave room for a loaded one.
setDefaultTimeout(60_000);

const MODEL = join(REPO_ROOT, "models", "quality");
const folder = tempFolder("ctxr-perplexity-");
let documents: PerplexityDocument[];
let runnerPath: string;
const runners: RunnerProcess[] = [];

async function start(model: string): Promise<RunnerProcess> {
  const runner = await RunnerProcess.start({ executable: runnerPath, model, blocks: 64, blockSize: 16, threads: 2 });
  runners.push(runner);
  return runner;
}

beforeAll(async () => {
  runnerPath = buildRunner();
  const { tokenizer, addBos } = await loadSourceTokenizer(resolveModelSource(MODEL));
  // Short families only: 3 lookup, 3 dependence, 3 order examples (60-200 tokens each).
  documents = heldOutExamples(3, 0, 0, ["lookup", "dependence", "order"]).map((example) => exampleDocument(tokenizer, addBos, example));
}, 600_000);

afterAll(async () => {
  for (const runner of runners) await runner.shutdown();
  folder.cleanup();
});

describe("tokenNll", () => {
  test("uniform logits cost log(vocab); the argmax target is top-1", () => {
    const uniform = tokenNll(new Float32Array(8), 3);
    expect(uniform.nll).toBeCloseTo(Math.log(8), 12);
    const peaked = tokenNll(Float32Array.from([0, 5, 1]), 1);
    expect(peaked.top1).toBe(true);
    expect(peaked.nll).toBeCloseTo(Math.log(1 + Math.exp(-5) + Math.exp(-4)), 12);
    expect(tokenNll(Float32Array.from([0, 5, 1]), 2).top1).toBe(false);
  });

  test("large logits do not overflow", () => {
    const { nll } = tokenNll(Float32Array.from([1000, 999]), 1);
    expect(nll).toBeCloseTo(Math.log(1 + Math.E), 9);
  });
});

describe("documents", () => {
  test("held-out examples: `<s> prompt answer \\n`, the answer marked", async () => {
    const { tokenizer, addBos } = await loadSourceTokenizer(resolveModelSource(MODEL));
    const [example] = heldOutExamples(1, 0, 0, ["lookup"]);
    const document = exampleDocument(tokenizer, addBos, example!);
    expect(document.group).toBe("lookup");
    expect(document.ids[0]).toBe(tokenizer.bosTokenId!);
    expect(tokenizer.decode(document.ids.slice(document.answerStart!))).toBe(`${example!.answer}\n`);
    expect(tokenizer.decode(document.ids.slice(1, document.answerStart!))).toBe(example!.prompt);
    // The same examples every time (seeded), distinct across indices.
    expect(heldOutExamples(3, 0, 0, ["lookup"]).map((e) => e.prompt)).toEqual(heldOutExamples(3, 0, 0, ["lookup"]).map((e) => e.prompt));
    expect(new Set(heldOutExamples(3, 0, 0, ["lookup"]).map((e) => e.prompt)).size).toBe(3);
  });

  test("a text in windows: BOS first in each, every token of the text in exactly one window", async () => {
    const { tokenizer } = await loadSourceTokenizer(resolveModelSource(MODEL));
    const text = "abcdefghij".repeat(5);
    const windows = textWindows(tokenizer, true, text, 16);
    expect(windows.map((w) => w.ids.length)).toEqual([16, 16, 16, 6]);
    for (const w of windows) expect(w.ids[0]).toBe(tokenizer.bosTokenId!);
    expect(windows.map((w) => tokenizer.decode(w.ids.slice(1))).join("")).toBe(text);
    expect(() => textWindows(tokenizer, true, text, 1)).toThrow("holds no text");
  });
});

describe("the runner's perplexity", () => {
  test("f32: every token's NLL is the reference Llama's on the same ids", async () => {
    const runner = await start(MODEL);
    const config = JSON.parse(readFileSync(join(MODEL, "config.json"), "utf8"));
    const reference = referenceLlama(config, readSafetensors(new Uint8Array(readFileSync(join(MODEL, "model.safetensors")))));
    const document = documents[0]!;
    const logits = referenceLogits(reference, document.ids);
    let expected = 0;
    for (let t = 1; t < document.ids.length; t++) expected += tokenNll(logits[t - 1]!, document.ids[t]!).nll;
    const sums = await documentNll(runner, document);
    expect(sums.tokens).toBe(document.ids.length - 1);
    expect(Math.abs(sums.nll - expected)).toBeLessThan(1e-3 * expected);
    // Chunked prefill (KV kept across chunks) scores the same.
    const chunked = await documentNll(runner, document, 7);
    expect(Math.abs(chunked.nll - sums.nll)).toBeLessThan(1e-4 * sums.nll);
  });

  test("Q8_0 GGUF within 2% of f32 (prefill and decode-sized chunks); Q4_0 within 5%", async () => {
    const f32Runner = await start(MODEL);
    const f32 = await perplexity(f32Runner, documents);
    // The trained model answers this text: a meaningful baseline.
    expect(f32.exactAnswers).toBe(f32.answers);
    expect(f32.answers).toBe(documents.length);
    // Decode-sized forwards (the int8 path of few rows) on three documents.
    const few = documents.filter((_, i) => i % 4 === 0);
    const f32Few = await perplexity(f32Runner, few);

    for (const [type, bound] of [["q8_0", 0.02], ["q4_0", 0.05]] as const) {
      const file = join(folder.path, `quality-${type}.gguf`);
      const summary = await quantizeModel({ input: MODEL, output: file, type });
      expect(summary.types[type.toUpperCase()]).toBeGreaterThanOrEqual(28);
      const runner = await start(file);
      expect(runner.info.weight_dtype).toBe(type);
      const cases = [
        { baseline: f32, quantized: await perplexity(runner, documents) },
        { baseline: f32Few, quantized: await perplexity(runner, few, { chunk: 16 }) },
      ];
      for (const { baseline, quantized } of cases) {
        expect(quantized.tokens).toBe(baseline.tokens);
        expect(Math.abs(quantized.perplexity / baseline.perplexity - 1)).toBeLessThan(bound);
        // Not bit-identical to f32: the file's quantized weights are what ran.
        expect(quantized.nll).not.toBe(baseline.nll);
      }
    }
  }, 60_000);

  test("the 2% bound catches a kernel-wide error: Q8_0 blocks with their last value zeroed fail it", async () => {
    // What a kernel that skips one of a block's 32 products would compute (measured: +6%).
    const file = join(folder.path, "quality-q8_0-damaged.gguf");
    await quantizeModel({ input: MODEL, output: file, type: "q8_0" });
    const bytes = new Uint8Array(readFileSync(file));
    for (const tensor of readGgufFile(file).tensors) {
      if (tensor.type !== GGML_TYPE.Q8_0) continue;
      // A Q8_0 block: an f16 scale and 32 int8 values.
      for (let block = tensor.fileOffset; block < tensor.fileOffset + tensor.bytes; block += 34) bytes[block + 33] = 0;
    }
    writeFileSync(file, bytes);
    const f32 = await perplexity(await start(MODEL), documents);
    const damaged = await perplexity(await start(file), documents);
    expect(damaged.perplexity / f32.perplexity - 1).toBeGreaterThan(0.02);
  });
});
