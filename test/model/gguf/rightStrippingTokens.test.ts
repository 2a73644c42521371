import { describe, expect, test } from "bun:test";
import { rightStrippingTokens, stripWhitespaceAfter } from "../../../src/model/gguf/rightStrippingTokens.ts";
import { TOKEN_TYPE } from "../../../src/model/gguf/ggufTokenTypes.ts";

const { normal, unknown, control, userDefined, byte } = TOKEN_TYPE;
const TOKENS = ["<unk>", "<s>", "</s>", "<0x0A>", "▁hi", "<|endoftext|>", "<|user|>", "<|end|>", "<td>", "[PAD9]"];
const TYPES = [unknown, control, userDefined, byte, normal, control, control, control, userDefined, unknown];

describe("llama.cpp's right-stripping tokens (set by general.name)", () => {
  test("a Phi-3 name: every control, user-defined and unknown token and </s>, less <unk>, <s> and <|endoftext|>", () => {
    for (const name of ["Phi3", "phi-3-mini-4k-instruct", "PHI3 medium"])
      expect(rightStrippingTokens(name, TOKENS, TYPES).sort()).toEqual(["</s>", "<td>", "<|end|>", "<|user|>", "[PAD9]"]);
  });

  test("other names, and Phi-3 as llama.cpp's converter names it now, strip nothing", () => {
    for (const name of [undefined, "", "Phi 3.5 Mini Instruct", "random phi 4 mini", "gemma 3"]) expect(rightStrippingTokens(name, TOKENS, TYPES)).toEqual([]);
  });

  test("only ASCII letters are lowercased, as std::tolower in the C locale", () => {
    expect(rightStrippingTokens("PHİ3", TOKENS, TYPES)).toEqual([]);
  });

  test("the whitespace after a stripping token goes: C's isspace set only, and only right after it", () => {
    const strip = stripWhitespaceAfter(["<|end|>", "<|user|>"])!;
    expect(strip("<|user|>\n Hi <|end|>\r\n\t\v\f<|user|>  x")).toBe("<|user|>Hi <|end|><|user|>x");
    expect(strip("<|end|>\u00a0a<|end|>\u3000b")).toBe("<|end|>\u00a0a<|end|>\u3000b");
    expect(strip("a <|endoftext|> b")).toBe("a <|endoftext|> b");
    expect(stripWhitespaceAfter([])).toBeNull();
  });

  test("token texts are matched literally (regular-expression characters are escaped)", () => {
    expect(stripWhitespaceAfter(["[PAD9]", "a.b"])!("[PAD9]  x P  a.b y axb z")).toBe("[PAD9]x P  a.by axb z");
  });
});
