/**
 * Router agreement with llama.cpp (issue 32, item 5): the experts llama.cpp's router chose at every
 * position and layer (tools/llama-oracle expert-routes), and their comparison with ctxr's.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { runProgram } from "./cli.ts";
import { llamaOracle, type ExpertRouteRows } from "./llamaOracle.ts";

export interface LlamaExpertRoutes {
  k: number;
  experts: number;
  /** Per layer, per position: the k experts in llama.cpp's order. */
  topk: ExpertRouteRows;
  /** Per layer, per position: the k-th largest router probability minus the (k+1)-th. */
  margin: number[][];
  /** The same gap in router logits (log p_k − log p_(k+1)): the tie measure, comparable across expert counts. */
  logitGap: number[][];
}

export function llamaExpertRoutes(file: string, ids: readonly number[], scratch: string): LlamaExpertRoutes {
  const idsFile = join(scratch, "oracle-route-ids.txt");
  writeFileSync(idsFile, ids.join(","));
  const result = runProgram([llamaOracle().driver, "expert-routes", file, idsFile]);
  if (result.code !== 0) throw new Error(`llama.cpp expert-routes of ${file} failed (${result.code}): ${result.stderr}`);
  const lines = result.stdout.trim().split("\n");
  const out = JSON.parse(lines[lines.length - 1]!) as { positions: number; k: number; experts: number; layers: { topk: number[][]; margin: number[]; logit_gap: number[] }[] };
  if (out.positions !== ids.length) throw new Error(`llama.cpp routed ${out.positions} positions of ${ids.length}`);
  return { k: out.k, experts: out.experts, topk: out.layers.map((l) => l.topk), margin: out.layers.map((l) => l.margin), logitGap: out.layers.map((l) => l.logit_gap) };
}

export interface RouteAgreement {
  /** (position, layer) cells whose margin is above the tie threshold, and how many of them agree. */
  decided: number;
  agreed: number;
  /** Cells whose logit gap is at or below the threshold (not compared), and how many of those differ anyway. */
  nearTies: number;
  nearTiesDiffering: number;
  /** The largest logit gap of a near-tie decided differently (0 when none). */
  largestDifferingTie: number;
  /**
   * Cells of a later layer than a near-tie decided differently, at its position or after it: their
   * input already differs (another expert's output went into it, and attention carries it to later
   * positions), so they are not compared.
   */
  downstream: number;
  /** Positions with a near-tie decided differently at some layer (their logits differ by that expert). */
  tiedPositions: Set<number>;
  /** The first decided cells that differ, for the failure message. */
  disagreements: string[];
}

const sameSet = (a: readonly number[] | undefined, b: readonly number[]) =>
  a !== undefined && [...a].sort((x, y) => x - y).join(",") === [...b].sort((x, y) => x - y).join(",");

/** Compares the chosen expert sets (as sets: the order among the k does not change the output). */
export function routeAgreement(ours: ExpertRouteRows, llama: LlamaExpertRoutes, tieThreshold: number): RouteAgreement {
  const result: RouteAgreement = { decided: 0, agreed: 0, nearTies: 0, nearTiesDiffering: 0, largestDifferingTie: 0, downstream: 0, tiedPositions: new Set(), disagreements: [] };
  const positions = llama.topk[0]?.length ?? 0;
  // The lowest layer with a near-tie decided differently so far: that expert's output reaches every
  // later layer of its position and, through attention, of every later position.
  let divergedLayer = Infinity;
  for (let position = 0; position < positions; position++) {
    llama.topk.forEach((byPosition, layer) => {
      const theirs = byPosition[position]!;
      const mine = ours[layer]?.[position];
      const margin = llama.logitGap[layer]![position]!;
      const same = sameSet(mine, theirs);
      if (layer > divergedLayer) {
        result.downstream++;
      } else if (margin <= tieThreshold) {
        result.nearTies++;
        if (!same) {
          result.nearTiesDiffering++;
          result.largestDifferingTie = Math.max(result.largestDifferingTie, margin);
          result.tiedPositions.add(position);
          divergedLayer = Math.min(divergedLayer, layer);
        }
      } else {
        result.decided++;
        if (same) result.agreed++;
        else if (result.disagreements.length < 5)
          result.disagreements.push(`layer ${layer} position ${position}: ctxr ${mine?.join(",")} llama.cpp ${theirs.join(",")} (logit gap ${margin}, probability margin ${llama.margin[layer]![position]})`);
      }
    });
  }
  return result;
}

/** `rows` (positions × vocab) without the rows of `positions`: the positions where two routers legitimately differ. */
export function withoutPositions(rows: Float32Array, vocab: number, positions: ReadonlySet<number>): Float32Array {
  const count = rows.length / vocab;
  const out = new Float32Array((count - [...positions].filter((p) => p < count).length) * vocab);
  let at = 0;
  for (let p = 0; p < count; p++) {
    if (positions.has(p)) continue;
    out.set(rows.subarray(p * vocab, (p + 1) * vocab), at);
    at += vocab;
  }
  return out;
}
