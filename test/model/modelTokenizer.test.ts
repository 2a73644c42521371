import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BOS_TOKEN_ID, BYTE_TOKENIZER_VOCAB, CHAT_TEMPLATE, EOS_TOKEN_ID, PAD_TOKEN_ID } from "../../src/model/byteTokenizer.ts";
import { ChatTemplateError, ModelTokenizerError, type ModelTokenizer, loadModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { TINY_MODEL_DEFAULTS, tinyModelFiles } from "../../src/model/tinyModel.ts";
import { writeModelFolder } from "../../src/model/writeModelFolder.ts";
import { tempFolder } from "../helpers/cli.ts";

let folder: { path: string; cleanup(): void };
let tiny: string;
let tokenizer: ModelTokenizer;
let caseNumber = 0;

/** A tiny model folder (as `ctxr model tiny` writes it), then edits to its JSON files. */
function modelFolder(edit: (dir: string) => void = () => {}): string {
  const dir = join(folder.path, `model${caseNumber++}`);
  writeModelFolder(dir, tinyModelFiles({ ...TINY_MODEL_DEFAULTS }));
  edit(dir);
  return dir;
}

function editJson(dir: string, name: string, change: (value: Record<string, unknown>) => void): void {
  const path = join(dir, name);
  const value = JSON.parse(readFileSync(path, "utf8"));
  change(value);
  writeFileSync(path, JSON.stringify(value));
}

beforeAll(async () => {
  folder = tempFolder("ctxr-model-tokenizer-");
  tiny = modelFolder();
  tokenizer = await loadModelTokenizer(tiny);
});
afterAll(() => folder.cleanup());

const bytesOf = (text: string) => [...new TextEncoder().encode(text)];

describe("loadModelTokenizer on a tiny model folder", () => {
  test("encode adds no special tokens; decode inverts it for ASCII and multi-byte UTF-8", () => {
    expect(tokenizer.encode("Hello")).toEqual([72, 101, 108, 108, 111]);
    expect(tokenizer.promptIds("Hello")).toEqual([72, 101, 108, 108, 111]);
    expect(tokenizer.encode("")).toEqual([]);
    expect(tokenizer.decode([])).toBe("");
    for (const text of ["Hello, ctxr!", "  spaces\tand\nlines\r\n", "héllo 日本語 한국어 🎉👩‍👩‍👧 ½∑", "\u0000\u007f"]) {
      const ids = tokenizer.encode(text);
      expect(ids).toEqual(bytesOf(text));
      expect(tokenizer.decode(ids)).toBe(text);
    }
  });

  test("special tokens written in text are recognised; decoding keeps or skips them", () => {
    const ids = tokenizer.encode("<s>a</s>");
    expect(ids).toEqual([BOS_TOKEN_ID, 97, EOS_TOKEN_ID]);
    expect(tokenizer.decode(ids)).toBe("<s>a</s>");
    expect(tokenizer.decode(ids, { skipSpecialTokens: true })).toBe("a");
    expect(tokenizer.isSpecialToken(EOS_TOKEN_ID)).toBe(true);
    expect(tokenizer.isSpecialToken(97)).toBe(false);
  });

  test("special ids, vocabulary size and eos ids", () => {
    expect(tokenizer.bosTokenId).toBe(BOS_TOKEN_ID);
    expect(tokenizer.eosTokenIds).toEqual([EOS_TOKEN_ID]);
    expect(tokenizer.vocabSize).toBe(BYTE_TOKENIZER_VOCAB);
    expect(tokenizer.dir).toBe(tiny);
  });

  test("tokenText and tokenBytes for logprobs", () => {
    expect(tokenizer.tokenText(72)).toBe("H");
    expect(tokenizer.tokenText(32)).toBe(" ");
    expect(tokenizer.tokenText(EOS_TOKEN_ID)).toBe("</s>");
    expect(tokenizer.tokenText(0xe6)).toBe("\uFFFD"); // a lone lead byte
    expect(tokenizer.tokenBytes(0xe6)).toEqual([0xe6]);
    expect(tokenizer.tokenBytes(32)).toEqual([32]);
    expect(tokenizer.tokenBytes(10)).toEqual([10]);
    for (let b = 0; b < 256; b++) expect(tokenizer.tokenBytes(b)).toEqual([b]);
    expect(tokenizer.tokenBytes(PAD_TOKEN_ID)).toEqual(bytesOf("<pad>"));
    // Ids past the tokenizer (a model's padding rows) read as nothing.
    expect(tokenizer.tokenText(BYTE_TOKENIZER_VOCAB + 5)).toBe("");
    expect(tokenizer.tokenBytes(BYTE_TOKENIZER_VOCAB + 5)).toEqual([]);
  });

  test("the chat template renders with bos/eos from tokenizer_config.json", () => {
    expect(tokenizer.hasChatTemplate).toBe(true);
    expect(tokenizer.applyChatTemplate([{ role: "user", content: "Hi" }])).toBe("<s>[INST] Hi [/INST]");
    const conversation = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello" },
      { role: "user", content: "日本" },
    ];
    const prompt = tokenizer.applyChatTemplate(conversation, { addGenerationPrompt: true });
    expect(prompt).toBe("<s><<SYS>>\nBe brief.\n<</SYS>>\n\n[INST] Hi [/INST] Hello</s>[INST] 日本 [/INST]");
    expect(tokenizer.promptIds(prompt)).toEqual([
      BOS_TOKEN_ID,
      ...bytesOf("<<SYS>>\nBe brief.\n<</SYS>>\n\n[INST] Hi [/INST] Hello"),
      EOS_TOKEN_ID,
      ...bytesOf("[INST] 日本 [/INST]"),
    ]);
  });

  test("raise_exception in a template is a ChatTemplateError with the template's message", () => {
    const call = () => tokenizer.applyChatTemplate([{ role: "tool", content: "x" }]);
    expect(call).toThrow(ChatTemplateError);
    expect(call).toThrow("Only system, user and assistant roles are supported");
  });

  test("add_generation_prompt, extra template variables and the special tokens reach the template", async () => {
    const dir = modelFolder((dir) =>
      editJson(dir, "tokenizer_config.json", (config) => {
        config.chat_template =
          "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ additional_special_tokens | join(',') }}|" +
          "{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}" +
          "{% if add_generation_prompt %}GEN{% endif %}{% if enable_thinking %}THINK{% endif %}";
        config.additional_special_tokens = ["<a>", { content: "<b>", special: true }];
        config.eos_token = { __type: "AddedToken", content: "</s>", special: true };
      }),
    );
    const model = await loadModelTokenizer(dir);
    const messages = [{ role: "user", content: "x" }];
    expect(model.applyChatTemplate(messages)).toBe("<s>|</s>|<pad>|<a>,<b>|user=x;GEN");
    expect(model.applyChatTemplate(messages, { addGenerationPrompt: false })).toBe("<s>|</s>|<pad>|<a>,<b>|user=x;");
    expect(model.applyChatTemplate(messages, { templateKwargs: { enable_thinking: true, messages: [] } })).toBe(
      "<s>|</s>|<pad>|<a>,<b>|user=x;GENTHINK",
    );
    expect(model.eosTokenIds).toEqual([EOS_TOKEN_ID]);
  });

  test("generation_config.json's eos_token_id (a number or a list) adds eos ids", async () => {
    const single = modelFolder((dir) => writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: PAD_TOKEN_ID })));
    expect((await loadModelTokenizer(single)).eosTokenIds).toEqual([EOS_TOKEN_ID, PAD_TOKEN_ID]);
    const list = modelFolder((dir) =>
      writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: [EOS_TOKEN_ID, 10, PAD_TOKEN_ID] })),
    );
    expect((await loadModelTokenizer(list)).eosTokenIds).toEqual([EOS_TOKEN_ID, 10, PAD_TOKEN_ID]);
    const none = modelFolder((dir) => {
      editJson(dir, "tokenizer_config.json", (config) => {
        delete config.eos_token;
        config.bos_token = null;
      });
      writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: 10 }));
    });
    const model = await loadModelTokenizer(none);
    expect(model.eosTokenIds).toEqual([10]);
    expect(model.bosTokenId).toBeNull();
    const bad = modelFolder((dir) => writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: "x" })));
    await expect(loadModelTokenizer(bad)).rejects.toThrow(/generation_config\.json: eos_token_id must be/);
  });

  test("a chat template from chat_template.jinja, chat_template.json or a named list", async () => {
    const withoutConfigTemplate = (dir: string) => editJson(dir, "tokenizer_config.json", (config) => void delete config.chat_template);
    const jinja = modelFolder((dir) => {
      withoutConfigTemplate(dir);
      writeFileSync(join(dir, "chat_template.jinja"), "J{% for m in messages %}{{ m.content }}{% endfor %}");
    });
    expect((await loadModelTokenizer(jinja)).applyChatTemplate([{ role: "user", content: "x" }])).toBe("Jx");
    const json = modelFolder((dir) => {
      withoutConfigTemplate(dir);
      writeFileSync(join(dir, "chat_template.json"), JSON.stringify({ chat_template: "C{{ messages[0].content }}" }));
    });
    expect((await loadModelTokenizer(json)).applyChatTemplate([{ role: "user", content: "x" }])).toBe("Cx");
    const named = modelFolder((dir) =>
      editJson(dir, "tokenizer_config.json", (config) => {
        config.chat_template = [
          { name: "tool_use", template: "T" },
          { name: "default", template: CHAT_TEMPLATE },
        ];
      }),
    );
    expect((await loadModelTokenizer(named)).applyChatTemplate([{ role: "user", content: "x" }])).toBe("<s>[INST] x [/INST]");
  });

  test("no chat template: loads, and applyChatTemplate says so", async () => {
    const dir = modelFolder((dir) => editJson(dir, "tokenizer_config.json", (config) => void delete config.chat_template));
    const model = await loadModelTokenizer(dir);
    expect(model.hasChatTemplate).toBe(false);
    expect(model.encode("a")).toEqual([97]);
    expect(() => model.applyChatTemplate([{ role: "user", content: "x" }])).toThrow(/has no chat template/);
  });

  test("a template that does not parse: loads, and applyChatTemplate names the file", async () => {
    const dir = modelFolder((dir) => editJson(dir, "tokenizer_config.json", (config) => void (config.chat_template = "{% for %}")));
    const model = await loadModelTokenizer(dir);
    expect(model.hasChatTemplate).toBe(false);
    expect(() => model.applyChatTemplate([{ role: "user", content: "x" }])).toThrow(/tokenizer_config\.json does not parse/);
  });

  test("missing and malformed files are errors naming the file", async () => {
    const missingTokenizer = modelFolder((dir) => unlinkSync(join(dir, "tokenizer.json")));
    await expect(loadModelTokenizer(missingTokenizer)).rejects.toThrow(/tokenizer\.json not found in/);
    const missingConfig = modelFolder((dir) => unlinkSync(join(dir, "tokenizer_config.json")));
    await expect(loadModelTokenizer(missingConfig)).rejects.toThrow(/tokenizer_config\.json not found in/);
    const badJson = modelFolder((dir) => writeFileSync(join(dir, "tokenizer.json"), "{ not json"));
    await expect(loadModelTokenizer(badJson)).rejects.toThrow(/tokenizer\.json is not valid JSON/);
    const notObject = modelFolder((dir) => writeFileSync(join(dir, "tokenizer_config.json"), "[1, 2]"));
    await expect(loadModelTokenizer(notObject)).rejects.toThrow(/tokenizer_config\.json must hold a JSON object/);
    const noModel = modelFolder((dir) => writeFileSync(join(dir, "tokenizer.json"), "{}"));
    await expect(loadModelTokenizer(noModel)).rejects.toThrow(/tokenizer\.json has no model section/);
    const badGeneration = modelFolder((dir) => writeFileSync(join(dir, "generation_config.json"), "{"));
    await expect(loadModelTokenizer(badGeneration)).rejects.toThrow(/generation_config\.json is not valid JSON/);
    const unknownEos = modelFolder((dir) => editJson(dir, "tokenizer_config.json", (config) => void (config.eos_token = "<|end|>")));
    await expect(loadModelTokenizer(unknownEos)).rejects.toThrow(/tokenizer_config\.json: eos_token "<\|end\|>" is not a token of/);
    const badEos = modelFolder((dir) => editJson(dir, "tokenizer_config.json", (config) => void (config.eos_token = 5)));
    await expect(loadModelTokenizer(badEos)).rejects.toThrow(ModelTokenizerError);
    await expect(loadModelTokenizer(join(folder.path, "no-such-folder"))).rejects.toThrow(/not found in/);
  });
});
