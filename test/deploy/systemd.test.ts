/**
 * deploy/systemd/: each unit passes `systemd-analyze verify` without a warning, keeps its
 * hardening, writes only inside its StateDirectory/CacheDirectory, uses only real `ctxr serve`
 * flags, and its ExecStart, expanded as systemd expands it, starts a server that works.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { CLI_ENTRY, REPO_ROOT, runProgram, tempFolder } from "../helpers/cli.ts";
import { tinyModelFolder } from "../helpers/engineKit.ts";
import { serveForTest } from "../helpers/httpServe.ts";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.ts";
import { spawnServer } from "../server/serverKit.ts";
import { scriptCommand, which } from "../../src/runtime/childProcess.ts";
import { documentedServeFlags, flagsUsed } from "./serveFlags.ts";
import { execStartArgv, expandSpecifiers, parseEnvironmentFile, parseUnitFile, unitEnvironment, unitValue, unitValues, type Specifiers, type UnitFile } from "./unitFile.ts";

setDefaultTimeout(60_000);

const SYSTEMD_DIR = join(REPO_ROOT, "deploy/systemd");
const INSTALLED_BINARY = "/usr/local/bin/ctxr";

interface UnitCase {
  file: string;
  /** The unit name systemd-analyze is given (an instance for a template). */
  unitName: string;
  instance?: string;
  envExample: string;
  /** The unit's EnvironmentFile= (as written, specifiers unexpanded). */
  envFile: string;
}

const UNITS: UnitCase[] = [
  { file: "ctxr.service", unitName: "ctxr.service", envExample: "ctxr.env.example", envFile: "/etc/ctxr/ctxr.env" },
  { file: "ctxr-proxy@.service", unitName: "ctxr-proxy@test.service", instance: "test", envExample: "proxy.env.example", envFile: "/etc/ctxr/proxy-%i.env" },
];

function readUnit(file: string): { text: string; unit: UnitFile } {
  const text = readFileSync(join(SYSTEMD_DIR, file), "utf8");
  return { text, unit: parseUnitFile(text) };
}

function specifiersIn(folder: string, instance?: string): Specifiers {
  return { stateRoot: join(folder, "state"), cacheRoot: join(folder, "cache"), ...(instance === undefined ? {} : { instance }) };
}

/** The folders systemd creates and gives the service: StateDirectory= and CacheDirectory=, expanded. */
function writableFolders(unit: UnitFile, specifiers: Specifiers): string[] {
  const expand = (key: string, root: string) => unitValues(unit, "Service", key).flatMap((value) => value.split(/\s+/)).map((name) => join(root, expandSpecifiers(name, specifiers)));
  return [...expand("StateDirectory", specifiers.stateRoot), ...expand("CacheDirectory", specifiers.cacheRoot)];
}

function inside(path: string, folder: string): boolean {
  const rel = relative(folder, path);
  return rel === "" || (!rel.startsWith("..") && !rel.startsWith("/"));
}

/** The unit's environment: Environment= lines, then its EnvironmentFile (the example), then overrides. */
function serviceEnvironment(unit: UnitFile, example: string, specifiers: Specifiers, overrides: Record<string, string> = {}): Record<string, string> {
  const fromUnit = Object.fromEntries(Object.entries(unitEnvironment(unit)).map(([name, value]) => [name, expandSpecifiers(value, specifiers)]));
  return { ...fromUnit, ...parseEnvironmentFile(readFileSync(join(SYSTEMD_DIR, example), "utf8")), ...overrides };
}

for (const unitCase of UNITS) {
  describe(`deploy/systemd/${unitCase.file}`, () => {
    const { text, unit } = readUnit(unitCase.file);

    test("systemd-analyze verify passes without a warning", () => {
      const analyze = which("systemd-analyze");
      if (analyze === null) throw new Error("systemd-analyze is not installed: apt-get install systemd (scripts/test-prerequisites.sh installs it as root)");
      const folder = tempFolder("ctxr-systemd-");
      try {
        // verify checks that ExecStart's program exists and is executable: point it at the CLI from source.
        const binary = join(folder.path, "ctxr");
        writeFileSync(binary, `#!/bin/sh\nexec ${scriptCommand(CLI_ENTRY).join(" ")} "$@"\n`);
        chmodSync(binary, 0o755);
        expect(unitValues(unit, "Service", "EnvironmentFile")).toEqual([unitCase.envFile]);
        const envFile = join(folder.path, unitCase.envFile.split("/").pop()!);
        writeFileSync(expandSpecifiers(envFile, specifiersIn(folder.path, unitCase.instance)), readFileSync(join(SYSTEMD_DIR, unitCase.envExample)));
        writeFileSync(join(folder.path, unitCase.file), text.replaceAll(INSTALLED_BINARY, binary).replaceAll(unitCase.envFile, envFile));
        const verified = runProgram([analyze, "verify", `./${unitCase.unitName}`], { cwd: folder.path, env: { SYSTEMD_LOG_COLOR: "0" } });
        expect({ code: verified.code, output: (verified.stdout + verified.stderr).trim() }).toEqual({ code: 0, output: "" });
      } finally {
        folder.cleanup();
      }
    });

    test("hardening: a dynamic user, read-only system, no new privileges, restarted on failure", () => {
      const service = (key: string) => unitValue(unit, "Service", key);
      expect(service("DynamicUser") === "yes" || (service("User") ?? "") !== "").toBe(true);
      expect({
        ProtectSystem: service("ProtectSystem"),
        ProtectHome: service("ProtectHome"),
        PrivateTmp: service("PrivateTmp"),
        NoNewPrivileges: service("NoNewPrivileges"),
        CapabilityBoundingSet: service("CapabilityBoundingSet"),
        Restart: service("Restart"),
        KillSignal: service("KillSignal"),
      }).toEqual({ ProtectSystem: "strict", ProtectHome: "yes", PrivateTmp: "yes", NoNewPrivileges: "yes", CapabilityBoundingSet: "", Restart: "on-failure", KillSignal: "SIGTERM" });
      expect(unitValues(unit, "Service", "CacheDirectory").length).toBeGreaterThan(0);
      expect(unitValue(unit, "Install", "WantedBy")).toBe("multi-user.target");
    });

    test("ExecStart runs the installed binary's serve with real flags only", () => {
      const specifiers = specifiersIn("/x", unitCase.instance);
      const argv = execStartArgv(unitValue(unit, "Service", "ExecStart")!, serviceEnvironment(unit, unitCase.envExample, specifiers), specifiers);
      expect(argv.slice(0, 2)).toEqual([INSTALLED_BINARY, "serve"]);
      const unknown = flagsUsed(argv).filter((flag) => !documentedServeFlags().has(flag));
      expect(unknown).toEqual([]);
    });

    test("everything it writes lies in its StateDirectory or CacheDirectory (ProtectSystem=strict)", () => {
      const specifiers = specifiersIn("/x", unitCase.instance);
      const env = serviceEnvironment(unit, unitCase.envExample, specifiers);
      const argv = execStartArgv(unitValue(unit, "Service", "ExecStart")!, env, specifiers);
      const writable = writableFolders(unit, specifiers);
      const written: string[] = [join(env.XDG_CACHE_HOME ?? "(XDG_CACHE_HOME unset: the cache would go to the home folder)", "ctxr")];
      for (const flag of ["--data-dir", "--kv-dir"]) {
        const at = argv.indexOf(flag);
        if (at >= 0) written.push(argv[at + 1]!);
      }
      if (argv.includes("--model")) expect(argv.includes("--data-dir") || argv.includes("--in-memory")).toBe(true);
      const outside = written.filter((path) => !writable.some((folder) => inside(path, folder)));
      expect(outside).toEqual([]);
    });
  });
}

describe("the units' ExecStart, started as systemd starts it", () => {
  let folder: { path: string; cleanup(): void };
  beforeAll(() => {
    folder = tempFolder("ctxr-systemd-run-");
  });
  afterAll(() => folder?.cleanup());

  async function startUnit(file: string, example: string, overrides: Record<string, string>, instance?: string) {
    const { unit } = readUnit(file);
    const specifiers = specifiersIn(join(folder.path, file), instance);
    for (const writable of writableFolders(unit, specifiers)) mkdirSync(writable, { recursive: true });
    const env = serviceEnvironment(unit, example, specifiers, { CTXR_HOST: "127.0.0.1", CTXR_PORT: "0", ...overrides });
    const argv = execStartArgv(unitValue(unit, "Service", "ExecStart")!, env, specifiers);
    const server = await spawnServer(argv.slice(2), env, 60_000, folder.path);
    return { server, specifiers };
  }

  test("ctxr.service serves the model and journals into its StateDirectory", async () => {
    const model = tinyModelFolder();
    try {
      const { server, specifiers } = await startUnit("ctxr.service", "ctxr.env.example", { CTXR_MODEL: model.path });
      try {
        expect((await server.get("/health")).status).toBe(200);
        const answer = await server.post("/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "hello" }], max_tokens: 2 });
        expect(answer.status).toBe(200);
        expect(answer.body.choices[0].message.role).toBe("assistant");
      } finally {
        server.kill("SIGTERM");
      }
      expect(await server.exited).toBe(0);
      const stateDirectory = join(specifiers.stateRoot, "ctxr");
      expect(readdirSync(stateDirectory).length).toBeGreaterThan(0);
      expect(existsSync(join(folder.path, "ctxr-data"))).toBe(false);
    } finally {
      model.cleanup();
    }
  });

  describe("ctxr-proxy@.service", () => {
    let redis: RedisServer;
    beforeAll(async () => {
      redis = await startRedisServer();
    });
    afterAll(async () => redis?.stop());

    test("proxies to its upstream with its state in Redis", async () => {
      const upstreamPaths: string[] = [];
      const upstream = serveForTest((request) => {
        upstreamPaths.push(new URL(request.url).pathname);
        return Response.json({ object: "list", data: [{ id: "upstream-model", object: "model" }] });
      });
      try {
        const { server } = await startUnit("ctxr-proxy@.service", "proxy.env.example", { CTXR_UPSTREAM: `http://127.0.0.1:${upstream.port}`, CTXR_STATE: `${redis.url}/0` }, "test");
        try {
          expect((await server.get("/health")).status).toBe(200);
          const models = await server.get("/v1/models");
          expect(models.status).toBe(200);
          expect(models.body.data[0].id).toBe("upstream-model");
          expect(upstreamPaths).toContain("/v1/models");
          // A change to the state goes to Redis (--state), not to a data directory.
          expect((await server.post("/v1/reorder", { contexts: [[1, 2]] })).status).toBe(200);
          expect(redis.cli("--scan", "--pattern", "ctxr:state*").trim()).not.toBe("");
        } finally {
          server.kill("SIGTERM");
        }
        expect(await server.exited).toBe(0);
      } finally {
        await upstream.stop(true);
      }
    });
  });
});
