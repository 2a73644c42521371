/**
 * Structured outputs hold for every vocabulary type we load, not only the byte-level one of the
 * committed models: a GPT-2-style byte-level BPE with merges (tokens spanning several bytes, some
 * half a character) and a SentencePiece-style BPE with byte fallback and ▁ (test/helpers/
 * tokenizerFolders.ts). Random walks through the masks of random schemas, a regex and a choice:
 * every answer, completed by the grammar where cut, parses and validates.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { GrammarCompiler } from "../../src/engine/grammarCompiler.ts";
import type { GrammarSpec } from "../../src/engine/grammarSpec.ts";
import { seededRandom } from "../../src/index/seededRandom.ts";
import { loadModelTokenizer } from "../../src/model/modelTokenizer.ts";
import { tempFolder } from "../helpers/cli.ts";
import { strictText } from "../helpers/grammarCompletion.ts";
import { allowedTokens, walkSchemas } from "../helpers/grammarWalks.ts";
import { randomSchema } from "../helpers/randomSchemas.ts";
import { byteLevelBpeFolder, sentencePieceFolder } from "../helpers/tokenizerFolders.ts";

const folder = tempFolder("ctxr-vocabularies-");
afterAll(() => folder.cleanup());

const FAMILIES = [
  { name: "byte-level BPE with merges", make: byteLevelBpeFolder, type: "byte_level", prependsSpace: false },
  { name: "SentencePiece with byte fallback", make: sentencePieceFolder, type: "byte_fallback", prependsSpace: true },
] as const;

describe("structured outputs on every vocabulary type", () => {
  for (const family of FAMILIES) {
    test(`${family.name}: random schemas' answers validate; a regex and a choice hold`, async () => {
      const tokenizer = await loadModelTokenizer(family.make(join(folder.path, family.type)));
      expect(tokenizer.vocabType).toBe(family.type);
      expect(tokenizer.prependsSpace).toBe(family.prependsSpace);
      // Tokens' bytes spell the text (a SentencePiece ▁ piece keeps its space, which decoding it
      // alone drops), with the space SentencePiece puts first.
      const bytes = tokenizer.encode(" the").flatMap((id) => tokenizer.tokenBytes(id));
      expect(new TextDecoder().decode(Uint8Array.from(bytes))).toBe(family.prependsSpace ? "  the" : " the");
      const vocab = tokenizer.vocabSize;
      const compiler = new GrammarCompiler(tokenizer, vocab, tokenizer.eosTokenIds);
      const tally = await walkSchemas(compiler, tokenizer, vocab, Array.from({ length: 60 }, (_, index) => randomSchema(3, 1000 + index)), 2, 7);
      expect(tally.failures).toEqual([]);
      expect(tally.finished).toBeGreaterThan(30);
      const specs: [GrammarSpec, RegExp][] = [
        [{ kind: "regex", pattern: "[0-9]{3}-(yes|no)" }, /^[0-9]{3}-(yes|no)$/],
        [{ kind: "choice", choices: ["the true", "the 10", "é €"] }, /^(the true|the 10|é €)$/],
      ];
      for (const [spec, pattern] of specs) {
        for (let walk = 0; walk < 10; walk++) {
          const random = seededRandom(walk + 1);
          const c = await compiler.constraint({ spec, field: "x" });
          const ids: number[] = [];
          while (!c.terminated && ids.length < 60) {
            const choices = await allowedTokens(c, vocab);
            const id = choices[Math.floor(random() * choices.length)]!;
            c.accept(id);
            ids.push(id, ...(await c.jumpForward(60)));
          }
          expect(c.terminated).toBe(true);
          c.dispose();
          expect(strictText(tokenizer, ids.filter((id) => !tokenizer.eosTokenIds.includes(id)))).toMatch(pattern);
        }
      }
    }, 120_000);
  }
});
