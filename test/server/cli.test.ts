/** `ctxr serve` as a user runs it: help, flags, the ready line, the API key from the environment, failures. */
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { appendFileSync, existsSync, readdirSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { runCli, tempFolder } from "../helpers/cli.ts";
import { buildRunner, tinyModelFolder } from "../helpers/engineKit.ts";
import { spawnServer } from "./serverKit.ts";
import { THINK_CLOSE_ID, thinkingModelFolder } from "../helpers/thinkingModel.ts";

setDefaultTimeout(60_000);

const folder = tempFolder("ctxr-serve-cli-");
afterAll(() => folder.cleanup());

describe("ctxr serve", () => {
  test("--help lists every option; the main help lists serve", () => {
    const run = runCli(["serve", "--help"]);
    expect(run.code).toBe(0);
    for (const flag of ["--host", "--port", "--data-dir", "--in-memory", "--api-key", "--capacity-tokens", "--ttl-seconds", "--block-tokens", "--max-body-bytes", "--max-contexts", "--max-blocks", "CTXR_API_KEY"]) {
      expect(run.stdout).toContain(flag);
    }
    expect(runCli(["--help"]).stdout).toContain("serve");
  });

  test("the main help names serve's three modes; serve --help is grouped by mode, with examples and sizes in one unit style", () => {
    const main = runCli(["--help"]).stdout;
    for (const mode of ["ctxr serve  ", "ctxr serve --upstream URL", "ctxr serve --model FILE.gguf|DIR", "vLLM"]) expect(main).toContain(mode);
    const help = runCli(["serve", "--help"]).stdout;
    const groups = ["Common options (every mode):", "Context-reuse API (every mode", "Proxy (--upstream):", "Engine (--model):", "Engine: KV-cache managed generation", "Engine: sparse decode"];
    const at = groups.map((group) => help.indexOf(group));
    expect(at.every((index) => index > 0)).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    // Each flag sits in its mode's group.
    expect(help.indexOf("--upstream-key KEY")).toBeGreaterThan(at[2]!);
    expect(help.indexOf("--upstream-key KEY")).toBeLessThan(at[3]!);
    expect(help.indexOf("--kv-dtype K")).toBeGreaterThan(at[3]!);
    expect(help.indexOf("--port PORT")).toBeLessThan(at[1]!);
    expect(help).toContain("Examples:\n  ctxr serve --in-memory");
    expect(help).toContain("CTXR_<OPTION>");
    expect(help).toContain("--config FILE");
    for (const size of ["(default 8 MiB)", "(default 128 MiB)", "(default 4 GiB", "(default 16 MiB)", "64 MiB"]) expect(help).toContain(size);
    // No default as a bare byte count or a unit glued to its number.
    expect(help).not.toMatch(/default \d{6,}|default \d+(B|KiB|MiB|GiB)\b/);
  });

  test("bad flags are usage errors (exit 2)", () => {
    for (const args of [
      ["--port", "http"],
      ["--port", "70000"],
      ["--port", "-1"],
      ["--in-memory", "--data-dir", "x"],
      ["--ttl-seconds", "0"],
      ["--capacity-tokens", "1.5"],
      ["--max-contexts", "0"],
      ["--api-key", ""],
      ["--block-tokens", "9999999999"],
      ["--frobnicate"],
    ]) {
      const run = runCli(["serve", ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain("ctxr serve: ");
      expect(run.stdout).toBe("");
    }
  });

  test("sparse decode's trigger flags: listed in --help, validated, refused without --model", () => {
    const help = runCli(["serve", "--help"]).stdout;
    for (const flag of ["--sparse-entropy-threshold", "--sparse-varentropy-threshold", "--sparse-trigger-window", "ctxr model calibrate-sparse"]) expect(help).toContain(flag);
    // Validation comes before the model is opened: a missing folder would fail with exit 1 instead.
    const model = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--sparse-entropy-threshold", "0"], "--sparse-entropy-threshold must be a positive number (nats), got '0'"],
      [["--sparse-entropy-threshold=-1"], "--sparse-entropy-threshold must be a positive number (nats), got '-1'"],
      [["--sparse-entropy-threshold", "abc"], "--sparse-entropy-threshold must be a positive number (nats), got 'abc'"],
      [["--sparse-entropy-threshold", "Infinity"], "--sparse-entropy-threshold must be a positive number (nats), got 'Infinity'"],
      [["--sparse-varentropy-threshold", "NaN"], "--sparse-varentropy-threshold must be a positive number (nats²), got 'NaN'"],
      [["--sparse-varentropy-threshold", ""], "--sparse-varentropy-threshold must be a positive number (nats²), got ''"],
      [["--sparse-trigger-window", "0"], "--sparse-trigger-window must be a positive integer, got '0'"],
      [["--sparse-trigger-window", "1.5"], "--sparse-trigger-window must be a positive integer, got '1.5'"],
      [["--sparse-trigger-window", "4097"], "--sparse-trigger-window must be at most 4096 steps, got '4097'"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...model, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    for (const [flag, value] of [["--sparse-entropy-threshold", "2"], ["--sparse-varentropy-threshold", "4"], ["--sparse-trigger-window", "8"]]) {
      const run = runCli(["serve", "--in-memory", "--port", "0", flag!, value!]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`ctxr serve: ${flag} needs --model`);
    }
  });

  test("--max-waiting-requests and --request-timeout: listed in --help, validated, model-only; a served model keeps them", async () => {
    const help = runCli(["serve", "--help"]).stdout;
    for (const flag of ["--max-waiting-requests N", "--request-timeout S", "deadline_ms"]) expect(help).toContain(flag);
    const missing = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--max-waiting-requests", "0"], "--max-waiting-requests must be a positive integer, got '0'"],
      [["--max-waiting-requests", "many"], "--max-waiting-requests must be a positive integer, got 'many'"],
      [["--request-timeout", "0"], "--request-timeout must be a positive number of seconds, at most 86400, got '0'"],
      [["--request-timeout=-1"], "--request-timeout must be a non-negative number"],
      [["--request-timeout", "86401"], "--request-timeout must be a positive number of seconds, at most 86400, got '86401'"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...missing, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    for (const [flag, value] of [["--max-waiting-requests", "4"], ["--request-timeout", "30"]]) {
      const run = runCli(["serve", "--in-memory", "--port", "0", flag!, value!]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`ctxr serve: ${flag} needs --model`);
    }
    const model = tinyModelFolder({}, "tiny");
    const server = await spawnServer(["--in-memory", "--model", model.path, "--threads", "1", "--kv-blocks", "512", "--max-waiting-requests", "7", "--request-timeout", "0.3"], { CTXR_RUNNER: buildRunner() });
    try {
      expect((await server.get("/metrics")).text).toContain("ctxr_generation_max_waiting 7\n");
      const timedOut = await server.post("/v1/completions", { prompt: "a long one", max_tokens: 7000, ignore_eos: true });
      expect(timedOut.status).toBe(504);
      expect(timedOut.body.error.message).toContain("the server's request timeout");
      expect((await server.post("/v1/completions", { prompt: "a short one", max_tokens: 2 })).status).toBe(200);
    } finally {
      server.process.kill("SIGTERM");
      await server.exited;
      model.cleanup();
    }
  });

  test("--reuse-scoring-budget and --reuse-scoring: listed in --help, validated, model-only; CTXR_REUSE_SCORING_BUDGET sets the budget", async () => {
    const help = runCli(["serve", "--help"]).stdout;
    for (const flag of ["--reuse-scoring-budget F", "--reuse-scoring M"]) expect(help).toContain(flag);
    const missing = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--reuse-scoring-budget", "1.5"], "--reuse-scoring-budget must be a number from 0 to 1, got '1.5'"],
      [["--reuse-scoring-budget", "some"], "--reuse-scoring-budget must be a number from 0 to 1, got 'some'"],
      [["--reuse-scoring-budget=-0.1"], "--reuse-scoring-budget must be a number from 0 to 1, got '-0.1'"],
      [["--reuse-scoring", "eager"], "--reuse-scoring must be one of idle, sync, got 'eager'"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...missing, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    for (const [flag, value] of [["--reuse-scoring-budget", "0.1"], ["--reuse-scoring", "sync"]]) {
      const run = runCli(["serve", "--in-memory", "--port", "0", flag!, value!]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`ctxr serve: ${flag} needs --model`);
    }
    const model = tinyModelFolder({}, "tiny");
    const server = await spawnServer(["--in-memory", "--model", model.path, "--threads", "1", "--kv-blocks", "128", "--reuse-scoring", "sync"], { CTXR_RUNNER: buildRunner(), CTXR_REUSE_SCORING_BUDGET: "0.05" });
    try {
      expect((await server.get("/metrics")).text).toContain("ctxr_background_budget 0.05\n");
      expect((await server.get("/v1/stats")).body.engine.reuse_scoring).toMatchObject({ mode: "sync", budget: 0.05 });
    } finally {
      server.process.kill("SIGTERM");
      await server.exited;
      model.cleanup();
    }
  });

  test("--kv-dtype: listed in --help, validated, model-only, f16 refused on cuda", () => {
    expect(runCli(["serve", "--help"]).stdout).toContain("--kv-dtype K");
    const model = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--kv-dtype", "bf16"], "--kv-dtype must be one of auto, f32, f16, got 'bf16'"],
      [["--kv-dtype", "f16", "--device", "cuda"], "--kv-dtype f16 needs --device cpu"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...model, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    const withoutModel = runCli(["serve", "--in-memory", "--port", "0", "--kv-dtype", "f16"]);
    expect(withoutModel.code).toBe(2);
    expect(withoutModel.stderr).toContain("ctxr serve: --kv-dtype needs --model");
  });

  test("--reasoning-parser: listed in --help, validated, model-only; none keeps the reasoning in the content, a name splits it", async () => {
    expect(runCli(["serve", "--help"]).stdout).toContain("--reasoning-parser P");
    const bad = runCli(["serve", "--in-memory", "--port", "0", "--model", join(folder.path, "no-model-here"), "--reasoning-parser", "deepseek"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("ctxr serve: --reasoning-parser must be one of qwen3, deepseek_r1, gpt-oss, harmony, auto, none, got 'deepseek'");
    const withoutModel = runCli(["serve", "--in-memory", "--port", "0", "--reasoning-parser", "qwen3"]);
    expect(withoutModel.code).toBe(2);
    expect(withoutModel.stderr).toContain("ctxr serve: --reasoning-parser needs --model");
    // The prompt opens <think> and </think> is banned: the whole answer is reasoning, when split.
    const model = thinkingModelFolder('{% for message in messages %}<|{{ message.role }}|>{{ message.content }}{% endfor %}<|assistant|><think>\n', "tiny-cli-thinking");
    const body = { model: "tiny", messages: [{ role: "user", content: "Why?" }], max_tokens: 5, seed: 1, logit_bias: { [THINK_CLOSE_ID]: -100 } };
    try {
      for (const [parser, split] of [["qwen3", true], ["none", false], ["auto", true]] as const) {
        const server = await spawnServer(["--in-memory", "--model", model.path, "--served-model-name", "tiny", "--threads", "1", "--kv-blocks", "64", "--reasoning-parser", parser], { CTXR_RUNNER: buildRunner() });
        try {
          const answer = await server.post("/v1/chat/completions", body);
          expect(answer.status).toBe(200);
          const message = answer.body.choices[0].message;
          const announced = server.startLines.find((line) => line.includes("reasoning parser"));
          expect(announced).toBe(split ? `ctxr serve: reasoning parser ${parser === "auto" ? "deepseek_r1" : parser}: answers' <think>…</think> returned apart as reasoning_content` : undefined);
          if (split) {
            expect(message.reasoning_content.length).toBeGreaterThan(0);
            expect(message.content).toBeNull();
            expect(answer.body.usage.completion_tokens_details).toEqual({ reasoning_tokens: 5 });
          } else {
            expect(message.reasoning_content).toBeUndefined();
            expect(message.content.length).toBeGreaterThan(0);
            expect(answer.body.usage.completion_tokens_details).toBeUndefined();
          }
        } finally {
          server.process.kill("SIGTERM");
          await server.exited;
        }
      }
    } finally {
      model.cleanup();
    }
  });

  test("--kv-events-publish: listed in --help, validated, model-only, refused with --no-prefix-cache; a port in use fails naming it", async () => {
    expect(runCli(["serve", "--help"]).stdout).toContain("--kv-events-publish E");
    expect(runCli(["serve", "--help"]).stdout).toContain("--kv-events-max-connections N");
    const model = ["--model", join(folder.path, "no-model-here")];
    const cases: [string[], string][] = [
      [["--kv-events-publish", "nope"], "--kv-events-publish: 'nope' is not a tcp://HOST:PORT endpoint"],
      [["--kv-events-publish", "tcp://*:70000"], "--kv-events-publish: 'tcp://*:70000': port 70000 is over 65535"],
      [["--kv-events-publish", "tcp://*:5557,hashes=hex"], "--kv-events-publish: hashes= must be bytes or int, got 'hex'"],
      [["--kv-events-publish", "tcp://*:5557,replay"], "--kv-events-publish: '' is not a tcp://HOST:PORT endpoint"],
      [["--kv-events-publish", "tcp://*:5557", "--no-prefix-cache"], "--kv-events-publish publishes the prefix cache's changes: it cannot go with --no-prefix-cache"],
      [["--kv-events-publish", "tcp://*:5557", "--kv-events-max-connections", "0"], "--kv-events-max-connections must be a positive integer, got '0'"],
      [["--kv-events-publish", "tcp://*:5557", "--kv-events-handshake-timeout", "0"], "--kv-events-handshake-timeout must be a positive number, got '0'"],
      [["--kv-events-max-connections", "8"], "--kv-events-max-connections needs --kv-events-publish"],
      [["--kv-events-handshake-timeout", "2"], "--kv-events-handshake-timeout needs --kv-events-publish"],
    ];
    for (const [args, message] of cases) {
      const run = runCli(["serve", "--in-memory", "--port", "0", ...model, ...args]);
      expect({ args, code: run.code }).toEqual({ args, code: 2 });
      expect(run.stderr).toContain(`ctxr serve: ${message}`);
    }
    const withoutModel = runCli(["serve", "--in-memory", "--port", "0", "--kv-events-publish", "tcp://127.0.0.1:5557"]);
    expect(withoutModel.code).toBe(2);
    expect(withoutModel.stderr).toContain("ctxr serve: --kv-events-publish needs --model");
    // The sockets are bound before the model loads: a port in use fails first.
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen({ host: "127.0.0.1", port: 0 }, () => resolve()));
    try {
      const port = (taken.address() as { port: number }).port;
      const inUse = runCli(["serve", "--in-memory", "--port", "0", ...model, "--kv-events-publish", `tcp://127.0.0.1:${port}`]);
      expect(inUse.code).toBe(1);
      expect(inUse.stderr).toContain(`ctxr serve: --kv-events-publish: cannot bind tcp://127.0.0.1:${port}: the port is in use`);
    } finally {
      await new Promise<void>((resolve) => taken.close(() => resolve()));
    }
  });

  test("--in-memory prints the ready line with (data: memory) and serves", async () => {
    const server = await spawnServer(["--in-memory"]);
    try {
      expect(server.startLines).toEqual([`ctxr serve: listening on ${server.url} (data: memory)`]);
      expect((await server.get("/healthz")).body).toEqual({ status: "ok" });
      expect((await server.get("/v1/stats")).body.persistent).toBe(false);
      expect((await server.post("/v1/reorder", { contexts: [[1, 2]] })).status).toBe(200);
    } finally {
      server.kill("SIGINT");
      expect(await server.exited).toBe(0);
    }
  });

  test("with no data flag, state goes to ./ctxr-data", async () => {
    const cwd = join(folder.path, "default-dir");
    await Bun.write(join(cwd, ".keep"), "");
    const server = await spawnServer([], {}, 20_000, cwd);
    try {
      expect(server.startLines).toEqual([`ctxr serve: listening on ${server.url} (data: ${join(cwd, "ctxr-data")}, created when first written)`]);
      // Nothing written yet: no folder, no lock.
      expect(existsSync(join(cwd, "ctxr-data"))).toBe(false);
      expect((await server.get("/v1/stats")).body.persistent).toBe(true);
      expect((await server.post("/v1/reorder", { contexts: [[1, 2]] })).status).toBe(200);
      expect(existsSync(join(cwd, "ctxr-data", "journal.lock"))).toBe(true);
    } finally {
      server.kill("SIGTERM");
      expect(await server.exited).toBe(0);
    }
    expect(readdirSync(join(cwd, "ctxr-data")).some((name) => name.startsWith("snapshot-"))).toBe(true);
  });

  test("two servers in one folder with the default data dir: neither creates it until it writes; the second writer is told the fixes", async () => {
    const cwd = join(folder.path, "shared-folder");
    await Bun.write(join(cwd, ".keep"), "");
    const first = await spawnServer([], {}, 20_000, cwd);
    const second = await spawnServer([], {}, 20_000, cwd);
    try {
      expect(existsSync(join(cwd, "ctxr-data"))).toBe(false);
      expect((await first.post("/v1/reorder", { contexts: [[1, 2]] })).status).toBe(200);
      const refused = await second.post("/v1/reorder", { contexts: [[3, 4]] });
      expect(refused.status).toBe(500);
      const health = await second.get("/healthz");
      expect(health.status).toBe(503);
      expect(health.body.error).toContain(`is locked by process ${first.process.pid}`);
      expect(health.body.error).toContain("give this one its own (--data-dir DIR) or none (--in-memory");
    } finally {
      for (const server of [first, second]) server.kill("SIGTERM");
      expect(await first.exited).toBe(0);
      await second.exited;
    }
    // The first one's state was kept and comes back.
    const restarted = await spawnServer([], {}, 20_000, cwd);
    try {
      expect(restarted.startLines.at(-1)).toBe(`ctxr serve: listening on ${restarted.url} (data: ${join(cwd, "ctxr-data")})`);
      expect((await restarted.get("/v1/stats")).body.contexts).toBe(1);
      // A data dir that exists is opened (and locked) at start: a second server is refused at once, with the fixes.
      const late = runCli(["serve", "--port", "0"], { cwd });
      expect(late.code).toBe(1);
      expect(late.stderr).toContain(`journal directory ${join(cwd, "ctxr-data")} is locked by process ${restarted.process.pid}`);
      expect(late.stderr).toContain("(--data-dir DIR) or none (--in-memory");
    } finally {
      restarted.kill("SIGTERM");
      expect(await restarted.exited).toBe(0);
    }
  });

  test("the API key comes from --api-key or CTXR_API_KEY; the flag wins", async () => {
    const fromEnv = await spawnServer(["--in-memory"], { CTXR_API_KEY: "env-key" });
    try {
      expect((await fromEnv.post("/v1/reset")).status).toBe(401);
      expect((await fromEnv.post("/v1/reset", undefined, { authorization: "Bearer env-key" })).status).toBe(200);
      expect((await fromEnv.get("/v1/stats")).status).toBe(200);
    } finally {
      fromEnv.kill("SIGTERM");
      await fromEnv.exited;
    }
    const fromFlag = await spawnServer(["--in-memory", "--api-key", "flag-key"], { CTXR_API_KEY: "env-key" });
    try {
      expect((await fromFlag.post("/v1/reset", undefined, { "x-api-key": "env-key" })).status).toBe(401);
      expect((await fromFlag.post("/v1/reset", undefined, { "x-api-key": "flag-key" })).status).toBe(200);
    } finally {
      fromFlag.kill("SIGTERM");
      await fromFlag.exited;
    }
  });

  test("limits and service options from flags", async () => {
    const server = await spawnServer(["--in-memory", "--max-contexts", "2", "--max-blocks", "2", "--max-body-bytes", "100", "--block-tokens", "10", "--capacity-tokens", "30", "--ttl-seconds", "3600"]);
    try {
      expect((await server.post("/v1/reorder", { contexts: [[1], [2], [3]] })).body.error.field).toBe("contexts");
      expect((await server.post("/v1/reorder", { contexts: [[1, 2, 3]] })).body.error.field).toBe("contexts[0]");
      expect((await server.post("/v1/reorder", { contexts: [["x".repeat(100)]] })).status).toBe(413);
      await server.post("/v1/reorder", { contexts: [[1, 2]] });
      await server.post("/v1/reorder", { contexts: [[3, 4]] });
      const stats = (await server.get("/v1/stats")).body;
      expect(stats).toMatchObject({ capacity_tokens: 30, ttl_ms: 3_600_000, contexts: 1, index_tokens: 20 });
    } finally {
      server.kill("SIGTERM");
      await server.exited;
    }
  });

  test("a port in use, or a data dir held by another server, fails with exit 1 and a message", async () => {
    const dataDir = join(folder.path, "held");
    const first = await spawnServer(["--data-dir", dataDir]);
    try {
      const port = new URL(first.url).port;
      const samePort = runCli(["serve", "--in-memory", "--port", port]);
      expect(samePort.code).toBe(1);
      expect(samePort.stderr).toMatch(/ctxr serve: .*(in use|EADDRINUSE)/i);
      const sameDir = runCli(["serve", "--port", "0", "--data-dir", dataDir]);
      expect(sameDir.code).toBe(1);
      expect(sameDir.stderr).toContain("ctxr serve: ");
      expect(sameDir.stdout).toBe("");
    } finally {
      first.kill("SIGTERM");
      await first.exited;
    }
  });

  test("a corrupt log tail is reported in one line before the ready line, and the server starts", async () => {
    const dataDir = join(folder.path, "torn");
    const first = await spawnServer(["--data-dir", dataDir]);
    const answer = await first.post("/v1/reorder", { contexts: [[1, 2, 3]] });
    first.kill("SIGKILL");
    await first.exited;
    const log = readdirSync(dataDir).filter((name) => name.startsWith("log-")).sort().pop()!;
    appendFileSync(join(dataDir, log), '{"torn rec');
    const second = await spawnServer(["--data-dir", dataDir]);
    try {
      expect(second.startLines.length).toBe(2);
      expect(second.startLines[0]).toMatch(/^ctxr serve: recovery: skipped 1 damaged log part\(s\) \(10 bytes\).*torn tail/);
      expect(second.startLines[1]).toBe(`ctxr serve: listening on ${second.url} (data: ${dataDir})`);
      expect((await second.get("/v1/stats")).body.recovery.skipped.length).toBe(1);
      expect((await second.post("/v1/evict", { request_ids: [answer.body.results[0].request_id] })).body.evicted).toBe(1);
    } finally {
      second.kill("SIGTERM");
      expect(await second.exited).toBe(0);
    }
    expect(existsSync(dataDir)).toBe(true);
  });
});
