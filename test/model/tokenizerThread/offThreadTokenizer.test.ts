/**
 * The tokenizer thread gives exactly the ids the request thread's tokenizer gives (texts, chats,
 * BOS), raises a chat template's error as the same class, and a thread that cannot load the
 * tokenizer leaves OffThreadTokenizer tokenizing inline with the same answers.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { resolveModelSource } from "../../../src/model/modelSource.ts";
import { ChatTemplateError, loadModelTokenizer, type ModelTokenizer } from "../../../src/model/modelTokenizer.ts";
import { INLINE_DECODE_IDS, INLINE_TOKENIZE_CHARS, OffThreadTokenizer } from "../../../src/model/tokenizerThread/offThreadTokenizer.ts";
import { TokenizerThread, TokenizerThreadError } from "../../../src/model/tokenizerThread/tokenizerThread.ts";
import { tempFolder } from "../../helpers/cli.ts";
import { byteLevelBpeFolder } from "../../helpers/tokenizerFolders.ts";
import { tinyModelFolder } from "../../helpers/engineKit.ts";
import { ggufFromModelFolder } from "../../helpers/ggufTinyModel.ts";
import { tokenizerFolderAsGguf } from "../../helpers/ggufTokenizerMetadata.ts";
import { parseGguf } from "../../../src/model/gguf/ggufReader.ts";
import { encodeGguf } from "../../../src/model/gguf/ggufWriter.ts";
import { loadSourceTokenizer } from "../../../src/model/sourceTokenizer.ts";

const TEMPLATE =
  "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('no bad roles here') }}{% endif %}<s>{{ m.role }}: {{ m.content }}</s>\n{% endfor %}" +
  "{% if tools %}tools: {{ tools | length }}\n{% endif %}{% if add_generation_prompt %}assistant:{% endif %}";

/** The error a promise rejects with (awaited as a plain promise: Bun's expect().rejects does not wait for a worker's reply). */
async function failure(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error("expected a rejection");
}

let folder: { path: string; cleanup(): void };
let dir: string;
let tokenizer: ModelTokenizer;
let thread: TokenizerThread;

// Past the inline limit, with multi-byte characters and special tokens written in the text.
const LONG = `{"name": "é日本語", "text": "<s>hello</s> world"}\n`.repeat(Math.ceil((3 * INLINE_TOKENIZE_CHARS) / 50));

beforeAll(async () => {
  folder = tempFolder("ctxr-tokenizer-thread-");
  dir = byteLevelBpeFolder(join(folder.path, "bpe"));
  writeFileSync(join(dir, "config.json"), "{}");
  const configPath = join(dir, "tokenizer_config.json");
  writeFileSync(configPath, JSON.stringify({ ...JSON.parse(readFileSync(configPath, "utf8")), chat_template: TEMPLATE }));
  tokenizer = await loadModelTokenizer(dir);
  thread = new TokenizerThread(resolveModelSource(dir));
});

afterAll(() => {
  thread?.close();
  folder?.cleanup();
});

describe("TokenizerThread", () => {
  test("a long text's ids are the inline tokenizer's, BOS first only when asked and not already there", async () => {
    const inline = tokenizer.encode(LONG);
    expect(inline.length).toBeGreaterThan(1000);
    expect(Array.from(await thread.encode(LONG, null))).toEqual(inline);
    const bos = tokenizer.bosTokenId!;
    expect(Array.from(await thread.encode(LONG, bos))).toEqual([bos, ...inline]);
    // The text starts with <s>: no second BOS.
    expect(Array.from(await thread.encode(`<s>${LONG}`, bos))).toEqual(tokenizer.encode(`<s>${LONG}`));
  });

  test("several requests at once each get their own answer", async () => {
    const texts = [LONG, `x${LONG}`, LONG.slice(0, 5000), "short"];
    const answers = await Promise.all(texts.map((text) => thread.encode(text, null)));
    answers.forEach((ids, i) => expect(Array.from(ids)).toEqual(tokenizer.encode(texts[i]!)));
    expect(thread.waiting).toBe(0);
  });

  test("a chat is rendered and encoded as the request thread would; the template's raise_exception comes back as ChatTemplateError", async () => {
    const messages = [{ role: "user", content: LONG }, { role: "assistant", content: "ok" }];
    const options = { tools: [{ type: "function", function: { name: "f" } }], addGenerationPrompt: true };
    expect(Array.from(await thread.encodeChat(messages, options, null))).toEqual(tokenizer.encode(tokenizer.applyChatTemplate(messages, options)));
    const refused = await failure(thread.encodeChat([{ role: "bad", content: LONG }], {}, null));
    expect(refused).toBeInstanceOf(ChatTemplateError);
    expect(refused.message).toBe("no bad roles here");
    expect(await thread.renderChat(messages, options)).toBe(tokenizer.applyChatTemplate(messages, options));
    expect(await failure(thread.renderChat([{ role: "bad", content: LONG }], {}))).toBeInstanceOf(ChatTemplateError);
  });

  test("many ids' exact text is the inline tokenizer's; none for a partial character or an unknown id", async () => {
    const ids = tokenizer.encode(LONG);
    expect(ids.length).toBeGreaterThan(INLINE_DECODE_IDS);
    expect(await thread.exactText(ids)).toBe(LONG);
    expect(tokenizer.exactText(ids)).toBe(LONG);
    const cut = tokenizer.encode("é").length > 1 ? [...ids, tokenizer.encode("é")[0]!] : [...ids, tokenizer.vocabSize + 5];
    expect(await thread.exactText(cut)).toBeNull();
    expect(await thread.exactText([...ids, tokenizer.vocabSize + 5])).toBeNull();
  });

  test("a thread that cannot load the tokenizer fails with TokenizerThreadError, then at once", async () => {
    const broken = new TokenizerThread({ kind: "folder", path: join(folder.path, "missing"), name: "missing" });
    try {
      const first = await failure(broken.encode(LONG, null));
      expect(first).toBeInstanceOf(TokenizerThreadError);
      expect(first.message).toMatch(/cannot load the tokenizer: tokenizer(_config)?\.json not found/);
      expect(await failure(broken.encode(LONG, null))).toBeInstanceOf(TokenizerThreadError);
    } finally {
      broken.close();
    }
  });
});

describe("TokenizerThread of a GGUF file", () => {
  test("loads the tokenizer from the file's metadata: the same ids as the request thread's", async () => {
    const model = tinyModelFolder({ layers: 1 }, "tiny-gguf");
    const file = join(model.path, "..", "tiny.gguf");
    // The tiny model with its tokenizer in the metadata (as test/engine/ggufEngine.test.ts builds it).
    const bytes = ggufFromModelFolder(model.path, "f32");
    const header = parseGguf(bytes);
    const metadata = new Map([...header.metadata].filter(([key]) => !key.startsWith("tokenizer.")));
    for (const [key, value] of tokenizerFolderAsGguf(model.path, { model: "gpt2", pre: "gpt-2" })) if (key.startsWith("tokenizer.")) metadata.set(key, value);
    const tensors = header.tensors.map((tensor) => ({ name: tensor.name, type: tensor.type, dims: tensor.dims, data: () => bytes.subarray(tensor.fileOffset, tensor.fileOffset + tensor.bytes) }));
    writeFileSync(file, encodeGguf(metadata, tensors));
    const source = resolveModelSource(file);
    expect(source.kind).toBe("gguf");
    const gguf = new TokenizerThread(source);
    try {
      const { tokenizer: inline } = await loadSourceTokenizer(source);
      expect(Array.from(await gguf.encode(LONG, null))).toEqual(inline.encode(LONG));
      const messages = [{ role: "user", content: LONG }];
      expect(Array.from(await gguf.encodeChat(messages, {}, null))).toEqual(inline.encode(inline.applyChatTemplate(messages)));
    } finally {
      gguf.close();
      model.cleanup();
    }
  });
});

describe("OffThreadTokenizer", () => {
  test("short and long texts and chats: the same ids inline, on the thread, and with a thread that failed", async () => {
    const broken = new TokenizerThread({ kind: "folder", path: join(folder.path, "missing"), name: "missing" });
    try {
      const bos = tokenizer.bosTokenId!;
      for (const prompts of [new OffThreadTokenizer(tokenizer, thread), new OffThreadTokenizer(tokenizer, broken), new OffThreadTokenizer(tokenizer, null)]) {
        for (const text of ["short text", LONG]) {
          expect(await prompts.encode(text)).toEqual(tokenizer.encode(text));
          expect(await prompts.encode(text, bos)).toEqual([bos, ...tokenizer.encode(text)]);
          const messages = [{ role: "user", content: text }];
          expect(await prompts.encodeChat(messages)).toEqual(tokenizer.encode(tokenizer.applyChatTemplate(messages)));
          expect(await failure(prompts.encodeChat([{ role: "bad", content: text }]))).toBeInstanceOf(ChatTemplateError);
          expect(await prompts.exactText(tokenizer.encode(text))).toBe(text);
          expect(await prompts.renderChat(messages)).toBe(tokenizer.applyChatTemplate(messages));
          expect(await failure(prompts.renderChat([{ role: "bad", content: text }]))).toBeInstanceOf(ChatTemplateError);
        }
      }
    } finally {
      broken.close();
    }
  });
});
