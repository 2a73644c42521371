/**
 * `serve --model qwen3.gguf` end to end through the HTTP API on the real CPU runner, with Qwen3's
 * own chat template (scripts/oracle/templates/qwen3.jinja, from the file's tokenizer.chat_template):
 * a chat completion is answered, its prompt is the template's rendering (the /tokenize ids), and
 * chat_template_kwargs {"enable_thinking": false} renders the empty think block after the
 * assistant header.
 *
 * Two files: a tiny Qwen3 folder converted by `ctxr model quantize` (always), and the random
 * qwen3 file llama.cpp's gguf-py writes (scripts/oracle/arch_qwen3.py: byte-level BPE with pre
 * qwen2, <|im_start|> / <|im_end|> control tokens), where /work/llama is present.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { REPO_ROOT, tempFolder } from "../helpers/cli.ts";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { type EngineTestServer, startEngineServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

const TEMPLATE = join(REPO_ROOT, "scripts/oracle/templates/qwen3.jinja");
const LLAMA = process.env.CTXR_LLAMA_DIR ?? "/work/llama";
const GGUF_PY = join(LLAMA, "llama.cpp-src", "gguf-py");
const PYTHON = "/usr/bin/python3";
const MESSAGES = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Name a prime." },
];

const scratch = tempFolder("ctxr-qwen3-serve-");
afterAll(() => scratch.cleanup());

async function tinyQwen3Gguf(): Promise<string> {
  const model = tinyModelFolder({ seed: 5, qkNorm: true, headDim: 24 }, "tiny-qwen3");
  try {
    const configPath = join(model.path, "tokenizer_config.json");
    writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: readFileSync(TEMPLATE, "utf8") }));
    const file = join(scratch.path, "tiny-qwen3.gguf");
    await quantizeModel({ input: model.path, output: file, type: "q8_0" });
    return file;
  } finally {
    model.cleanup();
  }
}

function llamaCppQwen3Gguf(): string {
  const file = join(scratch.path, "random-qwen3.gguf");
  const result = spawnSync(PYTHON, [join(REPO_ROOT, "scripts/oracle/random_gguf.py"), "--arch", "qwen3", "--head-dim", "96", "--out", file], { env: { ...process.env, GGUF_PY }, encoding: "utf8" });
  if (result.status !== 0) throw new Error(`random_gguf.py failed: ${result.stderr}`);
  return file;
}

const files: [string, () => Promise<string> | string, boolean][] = [
  ["a tiny Qwen3 folder converted by ctxr model quantize (q8_0)", tinyQwen3Gguf, true],
  ["a random qwen3 file written by llama.cpp's gguf-py", llamaCppQwen3Gguf, existsSync(GGUF_PY) && existsSync(PYTHON)],
];

for (const [name, make, available] of files) {
  describe.skipIf(!available)(`serve --model on ${name}`, () => {
    let api: EngineTestServer;
    beforeAll(async () => {
      api = await startEngineServer(await make());
    }, 300_000);
    afterAll(async () => api?.close());

    test("a chat completion is answered; its prompt is the Qwen3 template's rendering", async () => {
      const answer = await api.post("/v1/chat/completions", { messages: MESSAGES, max_tokens: 5, temperature: 0 });
      expect(answer.status).toBe(200);
      expect(answer.body.choices[0].message.role).toBe("assistant");
      expect(typeof answer.body.choices[0].message.content).toBe("string");
      expect(answer.body.usage.completion_tokens).toBeGreaterThan(0);
      const rendered = await api.post("/tokenize", { messages: MESSAGES });
      expect(rendered.status).toBe(200);
      expect(answer.body.usage.prompt_tokens).toBe(rendered.body.count);
    });

    test('chat_template_kwargs {"enable_thinking": false} adds the empty think block after the assistant header', async () => {
      const plain = await api.post("/tokenize", { messages: MESSAGES, return_token_strs: true });
      const noThinking = await api.post("/tokenize", { messages: MESSAGES, chat_template_kwargs: { enable_thinking: false }, return_token_strs: true });
      expect(plain.status).toBe(200);
      expect(noThinking.status).toBe(200);
      const added = noThinking.body.tokens.length - plain.body.tokens.length;
      expect(added).toBeGreaterThan(0);
      expect(noThinking.body.tokens.slice(0, plain.body.tokens.length)).toEqual(plain.body.tokens);
      const suffix = await api.post("/detokenize", { tokens: noThinking.body.tokens.slice(plain.body.tokens.length) });
      expect(suffix.status).toBe(200);
      expect(suffix.body.prompt).toBe("<think>\n\n</think>\n\n");
      const answer = await api.post("/v1/chat/completions", { messages: MESSAGES, max_tokens: 3, temperature: 0, chat_template_kwargs: { enable_thinking: false } });
      expect(answer.status).toBe(200);
      expect(answer.body.usage.prompt_tokens).toBe(plain.body.tokens.length + added);
    });
  });
}
