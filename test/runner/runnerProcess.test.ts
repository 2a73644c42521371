/**
 * RunnerProcess against the real CPU runner (built in beforeAll) and the tiny
 * model of the reference fixture: readiness and INFO, block ops, greedy tokens
 * equal to the PyTorch reference, COPY/MOVE/EXPORT/IMPORT keep a sequence's
 * cache, error statuses, a crash mid-request (kill -9), restart, load failures.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { RunnerCrashedError, RunnerLoadError, RunnerProcess, RunnerRequestError, runnerArgs } from "../../src/runner/runnerProcess.ts";
import { Status, sequenceRange } from "../../src/runner/runnerProtocol.ts";
import { argmax } from "../../src/engine/sampler.ts";
import { tempFolder } from "../helpers/cli.ts";
import { TINY_REFERENCE, buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";

setDefaultTimeout(120_000);

let executable = "";
let model: { path: string; cleanup(): void };
let runner: RunnerProcess;
const stderrLines: string[] = [];

beforeAll(async () => {
  executable = buildRunner();
  model = tinyModelFolder();
  runner = await RunnerProcess.start({ executable, model: model.path, blocks: 32, blockSize: 16, threads: 2, log: (line) => stderrLines.push(line) });
}, 300_000);

afterAll(async () => {
  await runner?.shutdown();
  model?.cleanup();
});

const prompt = TINY_REFERENCE.prompt_ids;

/** Greedy decoding of `count` tokens on `table` after the prompt was run. */
async function greedy(table: number[], first: number, start: number, count: number): Promise<number[]> {
  const out = [first];
  while (out.length < count) {
    const index = start + out.length - 1;
    const result = await runner.forward({ sequences: [{ table, tokens: [out[out.length - 1]!], indices: [index], logitRows: [0] }] });
    out.push(argmax(result.logits[0]!));
  }
  return out;
}

describe("RunnerProcess", () => {
  test("arguments", () => {
    expect(runnerArgs({ executable: "x", model: "/m", blocks: 8, blockSize: 32, threads: 3, device: "cuda:1" })).toEqual(["--model", "/m", "--blocks", "8", "--block-size", "32", "--threads", "3", "--device", "cuda:1"]);
    expect(runnerArgs({ executable: "x", model: "/m", device: "cpu" })).toEqual(["--model", "/m"]);
  });

  test("is ready with INFO describing the model and cache", async () => {
    expect(runner.alive).toBe(true);
    expect(runner.pid).toBeGreaterThan(0);
    expect(runner.info).toMatchObject({ layers: 2, hidden: 64, heads: 4, kv_heads: 2, head_dim: 16, vocab: 259, block_size: 16, num_blocks: 32, free_blocks: 32 });
    expect(runner.info.max_position_embeddings).toBe(8192);
    expect((await runner.queryInfo()).free_blocks).toBe(32);
  });

  test("greedy tokens equal the PyTorch reference; blocks come and go", async () => {
    const table = await runner.alloc(2);
    expect((await runner.queryInfo()).free_blocks).toBe(30);
    const result = await runner.forward({ sequences: [{ table, tokens: prompt, indices: sequenceRange(0, prompt.length), logitRows: [prompt.length - 1] }] });
    expect(result.logits[0]!.length).toBe(259);
    expect(await greedy(table, argmax(result.logits[0]!), prompt.length, TINY_REFERENCE.generated_ids.length)).toEqual(TINY_REFERENCE.generated_ids);
    await runner.free(table);
    expect((await runner.queryInfo()).free_blocks).toBe(32);
  });

  test("several sequences in one FORWARD give the logits each gives alone", async () => {
    const a = await runner.alloc(1);
    const b = await runner.alloc(1);
    const alone = await runner.forward({ sequences: [{ table: a, tokens: prompt, indices: sequenceRange(0, prompt.length), logitRows: [prompt.length - 1] }] });
    const both = await runner.forward({
      sequences: [
        { table: b, tokens: prompt.slice(0, 5), indices: sequenceRange(0, 5), logitRows: [4] },
        { table: a, tokens: [TINY_REFERENCE.generated_ids[0]!], indices: [prompt.length], logitRows: [0] },
      ],
    });
    expect(argmax(alone.logits[0]!)).toBe(TINY_REFERENCE.generated_ids[0]!);
    expect(argmax(both.logits[1]!)).toBe(TINY_REFERENCE.generated_ids[1]!);
    await runner.free([...a, ...b]);
  });

  test("COPY, MOVE and EXPORT/IMPORT keep a sequence's cache", async () => {
    const table = await runner.alloc(1);
    const first = await runner.forward({ sequences: [{ table, tokens: prompt, indices: sequenceRange(0, prompt.length), logitRows: [prompt.length - 1] }] });
    const next = argmax(first.logits[0]!);
    const decodeOn = async (t: number[]) => argmax((await runner.forward({ sequences: [{ table: t, tokens: [next], indices: [prompt.length], logitRows: [0] }] })).logits[0]!);
    const expected = TINY_REFERENCE.generated_ids[1]!;

    const [copy] = await runner.alloc(1);
    await runner.copy([{ src: table[0]!, dst: copy! }]);
    expect(await decodeOn([copy!])).toBe(expected);

    const [moved] = await runner.alloc(1);
    await runner.move([{ src: copy!, dst: moved! }]);
    await expect(runner.free([copy!])).rejects.toThrow(/not allocated/);
    expect(await decodeOn([moved!])).toBe(expected);

    const kv = await runner.export({ table, start: 0, count: prompt.length });
    expect(Array.from(kv.positions)).toEqual(Array.from(sequenceRange(0, prompt.length)));
    expect(kv.layers.length).toBe(2);
    expect(kv.layers[0]!.k.length).toBe(prompt.length * 32);
    const [imported] = await runner.alloc(1);
    await runner.import({ table: [imported!], start: 0, count: prompt.length }, kv);
    expect(await decodeOn([imported!])).toBe(expected);
    await runner.free([...table, moved!, imported!]);
  });

  test("error statuses leave the runner usable", async () => {
    const bad = runner.forward({ sequences: [{ table: [31], tokens: [1], indices: [0], logitRows: [0] }] });
    await expect(bad).rejects.toBeInstanceOf(RunnerRequestError);
    await expect(bad).rejects.toMatchObject({ status: Status.BAD_REQUEST, op: "FORWARD" });
    const full = runner.alloc(33);
    await expect(full).rejects.toMatchObject({ status: Status.OUT_OF_BLOCKS });
    await expect(full).rejects.toThrow(/out of KV blocks/);
    expect((await runner.queryInfo()).free_blocks).toBe(32);
    expect(runner.alive).toBe(true);
  });

  test("requests are answered in order when many are in flight", async () => {
    const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? runner.queryInfo().then((info) => info.num_blocks) : runner.alloc(1).then((ids) => runner.free(ids).then(() => -1)))));
    expect(answers.filter((a) => a === 32).length).toBe(25);
  });

  test("kill -9 mid-request: in-flight and later requests reject with RunnerCrashedError; restart() brings it back", async () => {
    const table = await runner.alloc(1);
    const pid = runner.pid!;
    const crashes: RunnerCrashedError[] = [];
    const off = runner.onCrash((error) => crashes.push(error));
    // Many requests in flight, then the kill (200: with 20, a fast machine once answered them all
    // before the signal landed).
    const inFlight = Array.from({ length: 200 }, () => runner.forward({ sequences: [{ table, tokens: prompt, indices: sequenceRange(0, prompt.length), logitRows: [0] }] }));
    process.kill(pid, "SIGKILL");
    const settled = await Promise.allSettled(inFlight);
    const rejected = settled.filter((s) => s.status === "rejected") as PromiseRejectedResult[];
    expect(rejected.length).toBeGreaterThan(0);
    for (const r of rejected) {
      expect(r.reason).toBeInstanceOf(RunnerCrashedError);
      expect(r.reason.signal).toBe("SIGKILL");
      expect(r.reason.message).toContain(`pid ${pid}`);
      expect(r.reason.message).toContain("SIGKILL");
    }
    expect(runner.alive).toBe(false);
    await expect(runner.queryInfo()).rejects.toBeInstanceOf(RunnerCrashedError);
    expect(crashes.length).toBe(1);
    off();

    await runner.restart();
    expect(runner.alive).toBe(true);
    expect(runner.pid).not.toBe(pid);
    expect(runner.restartCount).toBe(1);
    expect((await runner.queryInfo()).free_blocks).toBe(32);
  });

  test("shutdown is not a crash", async () => {
    const other = await RunnerProcess.start({ executable, model: model.path, blocks: 4, threads: 1 });
    let crashed = false;
    other.onCrash(() => (crashed = true));
    await other.shutdown();
    expect(other.alive).toBe(false);
    await expect(other.queryInfo()).rejects.toBeInstanceOf(RunnerCrashedError);
    expect(crashed).toBe(false);
  });
});

describe("load failures", () => {
  const folder = tempFolder("ctxr-runner-bad-");
  afterAll(() => folder.cleanup());

  test("a folder without a model: the runner's message and stderr", async () => {
    const empty = join(folder.path, "empty");
    mkdirSync(empty);
    const start = RunnerProcess.start({ executable, model: empty, threads: 1 });
    await expect(start).rejects.toThrow(/could not load|failed while loading/);
    const error = await start.catch((e) => e);
    expect(error instanceof RunnerLoadError || error instanceof RunnerCrashedError).toBe(true);
    expect(error.message).toContain("config.json");
  });

  test("a broken config.json", async () => {
    const broken = join(folder.path, "broken");
    mkdirSync(broken);
    writeFileSync(join(broken, "config.json"), "{ not json");
    await expect(RunnerProcess.start({ executable, model: broken, threads: 1 })).rejects.toThrow(/config\.json/);
  });

  test("an executable that does not exist", async () => {
    await expect(RunnerProcess.start({ executable: join(folder.path, "no-such-runner"), model: folder.path })).rejects.toBeInstanceOf(RunnerCrashedError);
  });

  test("an executable that exits at once", async () => {
    const script = join(folder.path, "exits.sh");
    writeFileSync(script, "#!/bin/sh\necho 'cannot do it' >&2\nexit 7\n", { mode: 0o755 });
    const error = await RunnerProcess.start({ executable: script, model: folder.path }).catch((e) => e);
    expect(error).toBeInstanceOf(RunnerCrashedError);
    expect(error.exitCode).toBe(7);
    expect(error.message).toContain("exited with code 7");
    expect(error.message).toContain("cannot do it");
  });
});
