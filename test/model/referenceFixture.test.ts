/**
 * The committed reference fixtures (scripts/reference-logits.py, an independent
 * PyTorch forward pass): their checkpoints are reproduced byte for byte by
 * `ctxr model tiny`, their prompts by the tokenizer, and their logits by the plain
 * TypeScript forward pass. The native runner must match them to 1e-4.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { tinyModelOptionsFromFlags } from "../../src/cli/commands/model.ts";
import { referenceLlama, referenceLogits } from "../../src/model/referenceLlama.ts";
import { readSafetensors } from "../../src/model/safetensors.ts";
import { tinyModelFiles } from "../../src/model/tinyModel.ts";
import { writeModelFolder } from "../../src/model/writeModelFolder.ts";
import { REPO_ROOT, tempFolder } from "../helpers/cli.ts";

/** The runner's tolerance against the fixture (issue 5). */
const RUNNER_TOLERANCE = 1e-4;

interface Fixture {
  model_command: string;
  model_args: string[];
  model_sha256: Record<string, string>;
  fixture_command: string;
  reference: { script: string; precision: string };
  prompt_text: string;
  prompt_ids: number[];
  generated_ids: number[];
  greedy_margins: number[];
  sequence_ids: number[];
  positions: number[];
  logits_shape: [number, number];
  sensitivity_max_abs: Record<string, number>;
  logits: number[][];
}

const FIXTURE_FOLDER = join(REPO_ROOT, "test/fixtures/engine");
const FIXTURES = readdirSync(FIXTURE_FOLDER).filter((name) => name.endsWith("-reference.json")).sort();

let folder: { path: string; cleanup(): void };
beforeAll(() => {
  folder = tempFolder("ctxr-fixture-");
});
afterAll(() => folder.cleanup());

test("the fixtures are there: the default tiny model and a variant", () => {
  expect(FIXTURES).toEqual(["tiny-reference.json", "tiny-variant-reference.json"]);
});

const argmax = (row: ArrayLike<number>) => {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
};

for (const name of FIXTURES) {
  describe(name, () => {
    const fixture = JSON.parse(readFileSync(join(FIXTURE_FOLDER, name), "utf8")) as Fixture;

    /** Regenerates the checkpoint from the fixture's command into a fresh folder. */
    function regenerate(): string {
      const dir = join(folder.path, name.replace(".json", ""));
      const parsed = tinyModelOptionsFromFlags(["--out", dir, ...fixture.model_args.slice(2)]);
      if (parsed === "help") throw new Error("unexpected --help");
      writeModelFolder(dir, tinyModelFiles(parsed.options));
      return dir;
    }
    let dir: string;
    beforeAll(() => {
      dir = regenerate();
    });

    test("records how it was made", () => {
      expect(fixture.model_args.slice(0, 2)).toEqual(["model", "tiny"]);
      expect(fixture.model_command).toBe(["ctxr", "model", "tiny", "--out", "DIR", ...fixture.model_args.slice(2)].join(" "));
      expect(fixture.fixture_command).toStartWith("/usr/bin/python3 scripts/reference-logits.py ");
      expect(fixture.fixture_command).toContain(`--out test/fixtures/engine/${name}`);
      expect(fixture.reference).toMatchObject({ script: "scripts/reference-logits.py", precision: "float64" });
    });

    test("its model command reproduces the checkpoint byte for byte", () => {
      expect(Object.keys(fixture.model_sha256).sort()).toEqual(["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
      for (const [file, sha256] of Object.entries(fixture.model_sha256)) {
        expect([file, createHash("sha256").update(readFileSync(join(dir, file))).digest("hex")]).toEqual([file, sha256]);
      }
    });

    test("the prompt ids are the tokenizer's encoding of the prompt text", () => {
      const tokenizer = new Tokenizer(
        JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
        JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")),
      );
      expect(tokenizer.encode(fixture.prompt_text).ids).toEqual(fixture.prompt_ids);
    });

    test("logits cover every position; greedy tokens are their argmax, by margins far above the tolerance", () => {
      const vocab = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")).vocab_size as number;
      expect(fixture.sequence_ids).toEqual([...fixture.prompt_ids, ...fixture.generated_ids]);
      expect(fixture.positions).toEqual(fixture.sequence_ids.map((_, i) => i));
      expect(fixture.logits_shape).toEqual([fixture.sequence_ids.length, vocab]);
      expect(fixture.logits.length).toBe(fixture.sequence_ids.length);
      for (const row of fixture.logits) {
        expect(row.length).toBe(vocab);
        for (const value of row) if (!Number.isFinite(value)) throw new Error("non-finite logit");
      }
      expect(fixture.generated_ids.length).toBe(8);
      fixture.generated_ids.forEach((token, step) => {
        expect(argmax(fixture.logits[fixture.prompt_ids.length - 1 + step]!)).toBe(token);
        expect(fixture.greedy_margins[step]!).toBeGreaterThan(100 * RUNNER_TOLERANCE);
      });
    });

    test("getting any part of the architecture wrong moves the logits by more than the tolerance", () => {
      const { float32_instead_of_float64: float32, ...wrong } = fixture.sensitivity_max_abs;
      expect(float32!).toBeLessThan(RUNNER_TOLERANCE / 10);
      expect(Object.keys(wrong).length).toBeGreaterThanOrEqual(5);
      for (const [part, change] of Object.entries(wrong)) expect([part, change > RUNNER_TOLERANCE]).toEqual([part, true]);
    });

    test("the TypeScript reference forward pass agrees with the PyTorch logits", () => {
      const model = referenceLlama(
        JSON.parse(readFileSync(join(dir, "config.json"), "utf8")),
        readSafetensors(new Uint8Array(readFileSync(join(dir, "model.safetensors")))),
      );
      const logits = referenceLogits(model, fixture.sequence_ids);
      let worst = 0;
      logits.forEach((row, t) => row.forEach((value, v) => (worst = Math.max(worst, Math.abs(value - fixture.logits[t]![v]!)))));
      expect(worst).toBeLessThan(1e-7); // the fixture keeps 9 significant digits
    });
  });
}
