/**
 * deploy/kubernetes/: the manifests read alike by a YAML 1.1 parser (as Kubernetes reads them)
 * and a YAML 1.2 one, pass the schema check of kubernetesManifests.ts, wire ctxr to the Services
 * of vLLM (HTTP and KV events) and Redis, use only real `ctxr serve` flags, match the image of
 * deploy/Dockerfile, and the ctxr container's arguments, run here against a fake engine and a
 * real Redis, start a proxy whose probe paths answer.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT } from "../helpers/cli.ts";
import { serveForTest } from "../helpers/httpServe.ts";
import { startRedisServer, type RedisServer } from "../helpers/redisServer.ts";
import { spawnServer } from "../server/serverKit.ts";
import { execForm, instructionsOf, parseDockerfile } from "./dockerfile.ts";
import { checkManifests, containersOf, deploymentsOf, expandedArgs, serviceTarget, type ManifestObject } from "./kubernetesManifests.ts";
import { documentedServeFlags, flagsUsed } from "./serveFlags.ts";
import { yaml11Documents, yaml12Documents } from "./yamlDocuments.ts";

setDefaultTimeout(60_000);

const MANIFEST_DIR = join(REPO_ROOT, "deploy/kubernetes");
const files = readdirSync(MANIFEST_DIR).filter((file) => file.endsWith(".yaml")).sort();
const objects: ManifestObject[] = files.flatMap((file) => yaml11Documents(join(MANIFEST_DIR, file)).map((object) => ({ file, object: object as Record<string, any> })));

function deploymentContainer(name: string): Record<string, any> {
  const container = deploymentsOf(objects).flatMap((entry) => containersOf(entry.object)).find((candidate) => candidate.name === name);
  if (container === undefined) throw new Error(`no container named ${name} in deploy/kubernetes`);
  return container;
}

const ctxr = deploymentContainer("ctxr");
const ctxrArgs = expandedArgs(ctxr, objects);
const argValues = (argv: string[], flag: string) => argv.flatMap((word, index) => (argv[index - 1] === flag ? [word] : []));

/** host and port of tcp://HOST:PORT, http://HOST:PORT/..., redis://HOST:PORT/DB. */
function hostPort(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: Number(parsed.port) };
}

describe("deploy/kubernetes", () => {
  test("holds manifests", () => {
    expect(files).toContain("kustomization.yaml");
    expect(objects.map((entry) => entry.object.kind).sort()).toEqual(["ConfigMap", "Deployment", "Deployment", "Deployment", "Kustomization", "Service", "Service", "Service"]);
  });

  test("YAML 1.1 (Kubernetes) and YAML 1.2 read every file the same", () => {
    for (const file of files) expect({ file, documents: yaml12Documents(join(MANIFEST_DIR, file)) }).toEqual({ file, documents: yaml11Documents(join(MANIFEST_DIR, file)) });
  });

  test("pass the schema check", () => {
    expect(checkManifests(objects)).toEqual([]);
  });

  test("the ctxr container uses only real serve flags, with every $(VARIABLE) set", () => {
    expect(ctxrArgs[0]).toBe("serve");
    expect(ctxrArgs.filter((arg) => arg.includes("$("))).toEqual([]);
    expect(flagsUsed(ctxrArgs).filter((flag) => !documentedServeFlags().has(flag))).toEqual([]);
  });

  test("ctxr listens on the container port its probes and Service use", () => {
    const http = ctxr.ports.find((port: any) => port.name === ctxr.readinessProbe.httpGet.port);
    expect(String(http.containerPort)).toBe(argValues(ctxrArgs, "--port")[0]!);
    expect(argValues(ctxrArgs, "--host")).toEqual(["0.0.0.0"]);
  });

  test("--upstream reaches vLLM's HTTP port through its Service", () => {
    const upstreams = argValues(ctxrArgs, "--upstream");
    expect(upstreams.length).toBeGreaterThan(0);
    for (const upstream of upstreams) {
      const { host, port } = hostPort(upstream);
      const target = serviceTarget(objects, host, port);
      expect(target?.container.name).toBe("vllm");
      expect(argValues(target!.container.args, "--port")).toEqual([String(target!.containerPort)]);
    }
  });

  test("--kv-events connects to the sockets vLLM's --kv-events-config binds, through its Service", () => {
    const events = argValues(ctxrArgs, "--kv-events");
    expect(events.length).toBe(argValues(ctxrArgs, "--upstream").length);
    expect(argValues(ctxrArgs, "--engine")).toEqual(["vllm"]);
    for (const value of events) {
      const [publisher, ...options] = value.split(",");
      const replay = options.find((option) => option.startsWith("replay="))?.slice("replay=".length);
      expect(replay).toBeDefined();
      const vllmHost = hostPort(argValues(ctxrArgs, "--upstream")[0]!).host;
      const config = JSON.parse(argValues(deploymentContainer("vllm").args, "--kv-events-config")[0]!);
      expect(config.enable_kv_cache_events).toBe(true);
      expect(config.publisher).toBe("zmq");
      for (const [endpoint, bound] of [[publisher!, config.endpoint], [replay!, config.replay_endpoint]] as const) {
        const { host, port } = hostPort(endpoint);
        expect(host).toBe(vllmHost);
        const target = serviceTarget(objects, host, port);
        expect(target?.container.name).toBe("vllm");
        // vLLM binds when the address has a * host (README "KV events from engines").
        expect(bound).toBe(`tcp://*:${target!.containerPort}`);
      }
    }
  });

  test("--state reaches the Redis Service", () => {
    const [state] = argValues(ctxrArgs, "--state");
    const { host, port } = hostPort(state!);
    expect(serviceTarget(objects, host, port)?.container.name).toBe("redis");
  });

  test("the ctxr container fits deploy/Dockerfile's image: its user, and writable volumes where the image writes", () => {
    const runtime = parseDockerfile(readFileSync(join(REPO_ROOT, "deploy/Dockerfile"), "utf8")).at(-1)!;
    const podSecurity = deploymentsOf(objects).find((entry) => containersOf(entry.object).includes(ctxr))!.object.spec.template.spec.securityContext;
    const useradd = instructionsOf(runtime, "RUN").map((run) => /useradd .*--uid (\d+)/.exec(run.text)?.[1]).find((uid) => uid !== undefined);
    expect(String(podSecurity.runAsUser)).toBe(useradd!);
    expect(ctxr.securityContext.readOnlyRootFilesystem).toBe(true);
    const volumes = execForm(instructionsOf(runtime, "VOLUME")[0]!)!;
    const mounted = ctxr.volumeMounts.map((mount: any) => mount.mountPath);
    expect(volumes.filter((volume) => !mounted.includes(volume))).toEqual([]);
  });
});

describe("deploy/kubernetes: the ctxr container's arguments, run", () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedisServer();
  });
  afterAll(async () => redis?.stop());

  test("start a proxy whose readiness and liveness paths answer 200 and are in its API", async () => {
    const upstream = serveForTest(() => Response.json({ object: "list", data: [] }));
    // The cluster's names, replaced by what runs here: the fake engine, this Redis, a closed KV-events port.
    const local = ctxrArgs.map((arg, index) => {
      const flag = ctxrArgs[index - 1];
      if (flag === "--upstream") return `http://127.0.0.1:${upstream.port}`;
      if (flag === "--state") return `${redis.url}/0`;
      if (flag === "--kv-events") return arg.replaceAll(/tcp:\/\/[^:,]+:/g, "tcp://127.0.0.1:");
      if (flag === "--host") return "127.0.0.1";
      if (flag === "--port") return "0";
      return arg;
    });
    const server = await spawnServer(local.slice(1));
    try {
      const openapi = (await server.get("/openapi.json")).body;
      for (const probe of [ctxr.readinessProbe, ctxr.livenessProbe]) {
        expect((await server.get(probe.httpGet.path)).status).toBe(200);
        expect(Object.keys(openapi.paths)).toContain(probe.httpGet.path);
      }
    } finally {
      server.kill("SIGTERM");
      await upstream.stop(true);
    }
    expect(await server.exited).toBe(0);
  });
});
