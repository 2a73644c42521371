/**
 * ctxr's mixture-of-experts router against llama.cpp's on llama.cpp's files (issue 32, item 5): at
 * every (position, layer) of a fixed pseudo-random id sequence, ctxr's CPU runner (FORWARD bit 4:
 * the first PREFILL_POSITIONS in one forward, the rest one token a forward) must choose the same
 * set of experts as llama.cpp (tools/llama-oracle expert-routes, one decode), wherever llama.cpp's
 * k-th router probability is above its (k+1)-th by more than TIE_THRESHOLD. Cells within it are
 * near-ties that f32 rounding may decide either way: they are counted and printed, not compared.
 *
 * Files: random qwen3moe weights (scripts/oracle/arch_qwen3moe.py), F32 and Q8_0 (llama.cpp's
 * quantizer keeps the router, ffn_gate_inp, in F32; the activations that reach it differ by the
 * engines' int8 rounding of the layers before); random gpt-oss weights (scripts/oracle/arch_gptoss.py:
 * router with a bias, top-k of its logits, softmax over the chosen), F32 (its tie measure is the
 * raw logit gap: llama.cpp's ffn_moe_probs are the router's logits there).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { tempFolder } from "../helpers/cli.ts";
import { buildRunner } from "../helpers/engineKit.ts";
import { llamaExpertRoutes, routeAgreement } from "../helpers/expertRoutes.ts";
import { ctxrForwardRun, llamaOracle, llamaQuantize, writeRandomGguf, type LlamaFileType, type RandomGgufOptions } from "../helpers/llamaOracle.ts";
import { pseudoRandomIds } from "../helpers/logprobRows.ts";

setDefaultTimeout(120_000);

const POSITIONS = 300;
/** random_gguf.py's vocabulary (the ids are llamaOracle.test.ts's). */
const VOCAB = 271;
const PREFILL_POSITIONS = 200;
/**
 * Router logit gap (k-th vs (k+1)-th) at or below which a choice is a near-tie. F32: the engines'
 * router logits differ by ~1e-3 (the largest gap decided differently was 1.1e-3). Q8_0: each
 * engine rounds the activations to int8 in its own blocks (the largest gap decided differently:
 * 2.0e-3). A near-tie decided differently puts another expert's output into every later layer of
 * its position and, through attention, of every later position: those cells are not compared.
 * Of the cells left, at least DECIDED_SHARE must be decided (not near-ties), and at least
 * MIN_DECIDED cells in all.
 */
const TIE_THRESHOLD: Record<string, number> = { F32: 1e-2, Q8_0: 0.02 };
const DECIDED_SHARE = 0.9;
const MIN_DECIDED = 150;

interface RouteRow {
  arch: "qwen3moe" | "gptoss";
  name: string;
  vocab: number;
  options: RandomGgufOptions;
  types: LlamaFileType[];
}

const moe = (experts: number, used: number, ffn: number) => ["--arch-option", `experts=${experts}`, "--arch-option", `experts_used=${used}`, "--arch-option", `expert_ffn=${ffn}`];
const ROWS: RouteRow[] = [
  { arch: "qwen3moe", vocab: VOCAB, name: "top-2 of 8", options: { hidden: 256, heads: 4, kvHeads: 2, headDim: 64, extraArgs: moe(8, 2, 256) }, types: ["F32", "Q8_0"] },
  // F32 only: among 32 experts most Q8_0 cells are within 0.15 of a tie.
  { arch: "qwen3moe", vocab: VOCAB, name: "top-8 of 32", options: { hidden: 128, heads: 4, kvHeads: 2, headDim: 64, layers: 3, extraArgs: moe(32, 8, 96) }, types: ["F32"] },
  // gpt-oss-20b routes top-4 of 32; the attention is gptossLlamaOracle.test.ts's small shape.
  { arch: "gptoss", vocab: 250, name: "top-4 of 32", options: { hidden: 64, heads: 4, kvHeads: 2, headDim: 16, layers: 4, ffn: 64, extraArgs: moe(32, 4, 64) }, types: ["F32"] },
];

let runner = "";
let scratch: { path: string; cleanup(): void };

beforeAll(() => {
  runner = process.env.CTXR_TEST_RUNNER ?? buildRunner();
  llamaOracle();
  scratch = tempFolder("ctxr-llama-routes-");
}, 300_000);

afterAll(() => scratch?.cleanup());

for (const row of ROWS) {
  describe(`${row.arch} (${row.name}): ctxr's router chooses llama.cpp's experts`, () => {
    let f32File = "";
    beforeAll(() => {
      f32File = writeRandomGguf(row.arch, join(scratch.path, `routes-${row.arch}-${row.name.replace(/\W+/g, "_")}-F32.gguf`), row.options);
    });
    for (const type of row.types) {
      test(type, async () => {
        const file = type === "F32" ? f32File : llamaQuantize(f32File, f32File.replace(/F32\.gguf$/, `${type}.gguf`), type);
        const ids = pseudoRandomIds(POSITIONS, row.vocab, 7);
        const llama = llamaExpertRoutes(file, ids, scratch.path);
        const ours = await ctxrForwardRun(runner, file, ids, PREFILL_POSITIONS, true);
        expect(ours.routes.length).toBe(llama.topk.length);
        const agreement = routeAgreement(ours.routes, llama, TIE_THRESHOLD[type]!);
        const summary = `${row.arch} ${row.name} ${type}: ${agreement.agreed} of ${agreement.decided} decided (position, layer) cells agree; ${agreement.nearTies} near-ties (logit gap <= ${TIE_THRESHOLD[type]}), ${agreement.nearTiesDiffering} of them chosen differently (largest gap ${agreement.largestDifferingTie.toExponential(2)}; positions ${[...agreement.tiedPositions].join(", ")}), ${agreement.downstream} later-layer cells after those not compared`;
        console.log(summary);
        expect(agreement.decided, summary).toBeGreaterThanOrEqual(DECIDED_SHARE * (POSITIONS * llama.topk.length - agreement.downstream));
        expect(agreement.decided, summary).toBeGreaterThanOrEqual(MIN_DECIDED);
        expect(agreement.disagreements, summary).toEqual([]);
        expect(agreement.agreed).toBe(agreement.decided);
      });
    }
  });
}
