import { describe, expect, test } from "bun:test";
import { carriesQuant, chooseHubFiles } from "../../../src/model/hub/hubFileChoice.ts";

const GGUF_REPO = [
  ".gitattributes",
  "README.md",
  "Llama-3.2-1B-Instruct-IQ4_XS.gguf",
  "Llama-3.2-1B-Instruct-Q4_K.gguf",
  "Llama-3.2-1B-Instruct-Q4_K_M.gguf",
  "Llama-3.2-1B-Instruct-Q8_0.gguf",
  "Llama-3.2-1B-Instruct-f16.gguf",
  "mmproj-Llama-3.2-1B-f16.gguf",
];
const REPO = "org/Llama-3.2-1B-Instruct-GGUF";

describe("picking a GGUF file by quantization", () => {
  test("the quantization is a whole word of the name, case-insensitive", () => {
    expect(carriesQuant("Llama-Q4_K_M.gguf", "q4_k_m")).toBe(true);
    expect(carriesQuant("Llama.Q4_K_M.gguf", "Q4_K_M")).toBe(true);
    expect(carriesQuant("Llama-Q4_K_M.gguf", "Q4_K")).toBe(false);
    expect(carriesQuant("Llama-IQ4_XS.gguf", "Q4_XS")).toBe(false);
    expect(carriesQuant("Llama-Q4_K_M-00001-of-00002.gguf", "Q4_K_M")).toBe(true);
  });

  test(":QUANT picks the one file carrying it; Q4_K is not Q4_K_M", () => {
    expect(chooseHubFiles(REPO, GGUF_REPO, "q8_0")).toEqual({ kind: "gguf", file: "Llama-3.2-1B-Instruct-Q8_0.gguf", files: ["Llama-3.2-1B-Instruct-Q8_0.gguf"] });
    expect(chooseHubFiles(REPO, GGUF_REPO, "Q4_K")).toMatchObject({ file: "Llama-3.2-1B-Instruct-Q4_K.gguf" });
    expect(chooseHubFiles(REPO, GGUF_REPO, "F16")).toMatchObject({ file: "Llama-3.2-1B-Instruct-f16.gguf" });
  });

  test("no tag: Q4_K_M, else the only GGUF model; projectors are not models", () => {
    expect(chooseHubFiles(REPO, GGUF_REPO, null)).toMatchObject({ file: "Llama-3.2-1B-Instruct-Q4_K_M.gguf" });
    expect(chooseHubFiles(REPO, ["a-Q8_0.gguf", "mmproj-f16.gguf", "README.md"], null)).toMatchObject({ file: "a-Q8_0.gguf" });
    expect(() => chooseHubFiles(REPO, ["a-Q8_0.gguf", "a-Q6_K.gguf"], null)).toThrow(/holds 2 GGUF models and none is Q4_K_M: pick one with hf:org\/Llama-3.2-1B-Instruct-GGUF:QUANT .*a-Q8_0\.gguf, a-Q6_K\.gguf/);
  });

  test("no match, or several, is an error listing the GGUF files", () => {
    expect(() => chooseHubFiles(REPO, GGUF_REPO, "Q3_K_S")).toThrow(/no GGUF file carries the quantization 'Q3_K_S'; its GGUF files: .*Q8_0\.gguf/);
    expect(() => chooseHubFiles(REPO, ["x-Q8_0.gguf", "y-Q8_0.gguf"], "Q8_0")).toThrow(/'Q8_0' matches 2 GGUF files \(x-Q8_0\.gguf, y-Q8_0\.gguf\); name one with hf:.*:FILE/);
    expect(() => chooseHubFiles(REPO, GGUF_REPO, "missing.gguf")).toThrow(/has no file missing\.gguf; its GGUF files/);
  });

  test(":FILE names a file, exactly or case-insensitively; a non-GGUF file is refused", () => {
    expect(chooseHubFiles(REPO, GGUF_REPO, "Llama-3.2-1B-Instruct-f16.gguf")).toMatchObject({ file: "Llama-3.2-1B-Instruct-f16.gguf" });
    expect(chooseHubFiles(REPO, GGUF_REPO, "llama-3.2-1b-instruct-q8_0.gguf")).toMatchObject({ file: "Llama-3.2-1B-Instruct-Q8_0.gguf" });
    expect(chooseHubFiles(REPO, ["sub/m.gguf"], "sub/m.gguf")).toMatchObject({ file: "sub/m.gguf" });
    expect(() => chooseHubFiles(REPO, GGUF_REPO, "README.md")).toThrow(/README\.md is not a GGUF file/);
  });

  test("a split GGUF brings every part, chosen by quantization, default or any part's name; a part missing from the list is named", () => {
    const parts = ["m-Q4_K_M-00001-of-00003.gguf", "m-Q4_K_M-00002-of-00003.gguf", "m-Q4_K_M-00003-of-00003.gguf"];
    const split = [...parts, "m-Q8_0.gguf"];
    const whole = { kind: "gguf" as const, file: parts[0]!, files: parts };
    expect(chooseHubFiles(REPO, split, null)).toEqual(whole);
    expect(chooseHubFiles(REPO, split, "q4_k_m")).toEqual(whole);
    expect(chooseHubFiles(REPO, split, "m-Q4_K_M-00002-of-00003.gguf")).toEqual(whole);
    expect(chooseHubFiles(REPO, split, "Q8_0")).toMatchObject({ file: "m-Q8_0.gguf", files: ["m-Q8_0.gguf"] });
    expect(() => chooseHubFiles(REPO, split, "Q6_K")).toThrow(/m-Q4_K_M-00001-of-00003\.gguf \(split in 3 parts\)/);
    const sub = ["Q4_K_M/m-00001-of-00002.gguf", "Q4_K_M/m-00002-of-00002.gguf"];
    expect(chooseHubFiles(REPO, sub, null)).toEqual({ kind: "gguf", file: sub[0], files: sub });
    expect(() => chooseHubFiles(REPO, [parts[0]!, parts[2]!], null)).toThrow(`${REPO}: m-Q4_K_M-00001-of-00003.gguf is the first of 3 parts of a split GGUF model, but the repository lacks part m-Q4_K_M-00002-of-00003.gguf`);
    expect(() => chooseHubFiles(REPO, [parts[0]!], null, " in the cache")).toThrow("but the repository in the cache lacks parts m-Q4_K_M-00002-of-00003.gguf, m-Q4_K_M-00003-of-00003.gguf");
    expect(() => chooseHubFiles(REPO, ["x-00001-of-99999.gguf"], null)).toThrow(/lacks parts x-00002-of-99999\.gguf, x-00003-of-99999\.gguf, x-00004-of-99999\.gguf and 99995 more$/);
  });
});

describe("a safetensors repository", () => {
  const FOLDER = ["config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json", "README.md", "original/consolidated.00.pth", "onnx/model.onnx"];

  test("the folder's weights, config and tokenizer files, nothing else", () => {
    expect(chooseHubFiles("org/m", FOLDER, null)).toEqual({
      kind: "folder",
      files: ["config.json", "generation_config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"],
    });
  });

  test("a quantization tag or a non-GGUF file needs a GGUF repository", () => {
    expect(() => chooseHubFiles("org/m", FOLDER, "Q4_K_M")).toThrow(/has no GGUF file to pick the quantization 'Q4_K_M' from .*write hf:org\/m/);
    expect(() => chooseHubFiles("org/m", FOLDER, "config.json")).toThrow(/config\.json is not a GGUF file; a safetensors model is fetched as a whole folder/);
  });

  test("neither GGUF nor safetensors: an error naming what is there", () => {
    expect(() => chooseHubFiles("org/m", ["config.json", "pytorch_model.bin"], null)).toThrow(/neither a GGUF file nor a safetensors model.*PyTorch \.bin.*pytorch_model\.bin/);
    expect(() => chooseHubFiles("org/m", [], null, " in the cache")).toThrow(/in the cache; it holds no files/);
  });
});
