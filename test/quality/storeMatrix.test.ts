/** The quality benchmark's storing-policy axis: its flags' parsing and the warm-up tally (src/quality/storeMatrix.ts). */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { parseReuseScoringModes, parseStorePolicies, serverReuseScoring, warmUpStored, WarmUpTally, type ReuseScoringMode } from "../../src/quality/storeMatrix.ts";
import type { WarmUpResult } from "../../src/quality/qualityClient.ts";
import { REPO_ROOT, runProgram } from "../helpers/cli.ts";
import { scriptCommand } from "../../src/runtime/childProcess.ts";

const warmUp = (chunksStored: number, documents = 6, storer: WarmUpResult["storer"] = "prophet"): WarmUpResult => ({ storer, servedPolicy: storer, documents, chunksStored });

describe("--store-policies and --reuse-scoring", () => {
  test("a list of storing policies, in the order given, spaces allowed", () => {
    expect(parseStorePolicies("cachecraft,prophet, epic ,none,full")).toEqual(["cachecraft", "prophet", "epic", "none", "full"]);
    expect(parseStorePolicies("prefix")).toEqual(["prefix"]);
    expect(parseReuseScoringModes("sync,idle")).toEqual(["sync", "idle"]);
    expect(parseReuseScoringModes("idle,idle-settled")).toEqual(["idle", "idle-settled"]);
    expect(["sync", "idle", "idle-settled"].map((m) => serverReuseScoring(m as ReuseScoringMode))).toEqual(["sync", "idle", "idle"]);
  });

  test("unknown, repeated or empty entries are refused with a message naming the flag and the entry", () => {
    expect(() => parseStorePolicies("cachecraft,lmcache")).toThrow("--store-policies: unknown 'lmcache' (one of cachecraft, prophet, epic, none, prefix, full)");
    expect(() => parseStorePolicies("prophet,prophet")).toThrow("--store-policies: 'prophet' given twice");
    expect(() => parseStorePolicies("prophet,,epic")).toThrow("--store-policies: empty entry");
    expect(() => parseStorePolicies("")).toThrow("--store-policies needs at least one of");
    expect(() => parseReuseScoringModes("sync,later")).toThrow("--reuse-scoring: unknown 'later' (one of sync, idle, idle-settled)");
  });

  test("bench-quality refuses a bad --store-policies before it starts a server", () => {
    const run = runProgram([...scriptCommand(join(REPO_ROOT, "scripts", "bench-quality.ts")), "--store-policies", "cachecraft,bogus", "--questions", "1"]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain("--store-policies: unknown 'bogus'");
    expect(run.stderr).not.toContain("listening");
  });
});

describe("what the warm-ups stored", () => {
  test("a warm-up that stored nothing is not one to measure; one that stored some chunks is", () => {
    expect(warmUpStored(warmUp(0))).toBe(false);
    expect(warmUpStored(warmUp(6))).toBe(true);
    // A chunk an earlier example stored is found, not stored again.
    expect(warmUpStored(warmUp(5))).toBe(true);
  });

  test("the tally counts chunks (the head a first warm-up also stores does not count), partial and empty warm-ups", () => {
    const tally = new WarmUpTally();
    tally.add(warmUp(7));
    tally.add(warmUp(5));
    tally.add(warmUp(0, 6, "full"));
    expect(tally.summary()).toEqual({ examples: 3, documents: 18, chunks_stored: 11, partial: 1, empty: 1, served_policies: ["prophet", "full"], settle_ms_median: null });
    tally.settledMs.push(30, 10, 20, 40);
    expect(tally.summary().settle_ms_median).toBe(25);
  });
});
