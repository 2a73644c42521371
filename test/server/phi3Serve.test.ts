/**
 * `ctxr serve --model phi3.gguf` end to end: a Phi-3 GGUF (Phi-4-mini's shape: LongRoPE, 3/4 of
 * each head rotated; written by `ctxr model quantize` from a Phi-3 folder with Phi-3's chat
 * template) answers chat completions through the real server and CPU runner, the prompt rendered
 * with the template from the file's metadata, whole and streamed alike.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { quantizeModel } from "../../src/model/gguf/quantizeModel.ts";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { phi3FolderFromLlama } from "../helpers/phi3Folder.ts";
import { spawnServer, type SpawnedServer } from "./serverKit.ts";

setDefaultTimeout(120_000);

// Phi-3-mini-4k-instruct's chat template (tokenizer_config.json).
const PHI3_TEMPLATE =
  "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}" +
  "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}" +
  "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

const scratch = tempFolder("ctxr-phi3-serve-");
let server: SpawnedServer;

beforeAll(async () => {
  const runner = buildRunner();
  const llama = tinyModelFolder({ seed: 9, hidden: 64, heads: 4, kvHeads: 2, intermediate: 96, layers: 2 }, "tiny-phi3-serve");
  try {
    const folder = phi3FolderFromLlama(llama.path, join(scratch.path, "phi-4-mini-shaped"), {
      partial_rotary_factor: 0.75,
      max_position_embeddings: 4096,
      original_max_position_embeddings: 64,
      rope_scaling: { type: "longrope", long_factor: [1, 1.5, 2.5, 4, 8, 16], short_factor: [1, 1.1, 1.2, 1.3, 1.4, 1.5] },
    });
    const configPath = join(folder, "tokenizer_config.json");
    writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: PHI3_TEMPLATE }));
    const gguf = join(scratch.path, "phi3.gguf");
    await quantizeModel({ input: folder, output: gguf, type: "q8_0" });
    server = await spawnServer(["--in-memory", "--model", gguf, "--threads", "2", "--kv-blocks", "64"], { CTXR_RUNNER: runner }, 60_000);
  } finally {
    llama.cleanup();
  }
}, 300_000);

afterAll(async () => {
  if (server) {
    server.kill("SIGTERM");
    expect(await server.exited).toBe(0);
  }
  scratch.cleanup();
});

describe("ctxr serve --model phi3.gguf", () => {
  const messages = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Name a colour." },
  ];
  // The template's text: the tiny byte vocabulary gives one token per byte (no BOS in the template).
  const rendered = "<|system|>\nBe brief.<|end|>\n<|user|>\nName a colour.<|end|>\n<|assistant|>\n";

  test("answers a chat completion, its prompt rendered by the file's Phi-3 template", async () => {
    const answer = await server.post("/v1/chat/completions", { model: "phi3", messages, max_tokens: 8, temperature: 0 });
    expect(answer.status).toBe(200);
    expect(answer.body.choices[0].message.role).toBe("assistant");
    expect(typeof answer.body.choices[0].message.content).toBe("string");
    expect(answer.body.usage.completion_tokens).toBeGreaterThan(0);
    expect(answer.body.usage.prompt_tokens).toBe(new TextEncoder().encode(rendered).length);
  });

  test("the streamed answer is the whole one (greedy)", async () => {
    const whole = await server.post("/v1/chat/completions", { model: "phi3", messages, max_tokens: 8, temperature: 0 });
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "phi3", messages, max_tokens: 8, temperature: 0, stream: true }),
    });
    expect(response.status).toBe(200);
    let streamed = "";
    for (const line of (await response.text()).split("\n")) {
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      streamed += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? "";
    }
    expect(streamed).toBe(whole.body.choices[0].message.content);
  });
});
