/**
 * The runtime adapters, on whichever runtime runs the tests: bun test checks the Bun
 * implementations, scripts/test-deno.sh the Deno twins, with the same expectations.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runSync, scriptCommand, spawnPiped, which } from "../../src/runtime/childProcess.ts";
import { readFileBytes } from "../../src/runtime/files.ts";
import { serveHttp, type HttpServer } from "../../src/runtime/httpServer.ts";
import { sleep } from "../../src/runtime/sleep.ts";

const servers: HttpServer[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) await server.stop(true);
});

function serve(fetch: (request: Request) => Response | Promise<Response>, port = 0): HttpServer {
  const server = serveHttp({ hostname: "127.0.0.1", port, idleTimeoutS: 10, fetch, error: (error) => Response.json({ caught: error.message }, { status: 500 }) });
  servers.push(server);
  return server;
}

async function text(stream: ReadableStream<Uint8Array>): Promise<string> {
  return new Response(stream).text();
}

describe("serveHttp", () => {
  test("answers on the port it bound (0 picks one), with the request's method, path and body", async () => {
    const server = serve(async (request) => Response.json({ method: request.method, path: new URL(request.url).pathname, body: await request.text() }));
    expect(server.port).toBeGreaterThan(0);
    const response = await fetch(`http://127.0.0.1:${server.port}/a/b?c=1`, { method: "POST", body: "hello" });
    expect(await response.json()).toEqual({ method: "POST", path: "/a/b", body: "hello" });
  });

  test("a handler that throws is answered by the error handler", async () => {
    const server = serve(() => {
      throw new Error("handler broke");
    });
    const response = await fetch(`http://127.0.0.1:${server.port}/`);
    expect(response.status).toBe(500);
    expect(await response.json()).toEqual({ caught: "handler broke" });
  });

  test("a port in use throws an error whose code is EADDRINUSE", () => {
    const first = serve(() => new Response("first"));
    let thrown: unknown = null;
    try {
      serve(() => new Response("second"), first.port);
    } catch (error) {
      thrown = error;
    }
    expect((thrown as NodeJS.ErrnoException | null)?.code).toBe("EADDRINUSE");
  });

  test("stop(false) lets a request in flight finish, then refuses new connections", async () => {
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    const server = serve(async () => {
      await released;
      return new Response("finished");
    });
    const url = `http://127.0.0.1:${server.port}/`;
    const inFlight = fetch(url);
    await sleep(100);
    const stopped = server.stop(false);
    release();
    expect(await (await inFlight).text()).toBe("finished");
    await stopped;
    await expect(fetch(url)).rejects.toThrow();
  });
});

describe("child processes", () => {
  test("spawnPiped: stdin reaches the child, stdout and stderr come back, the exit code is reported", async () => {
    const child = spawnPiped(["sh", "-c", 'read line; echo "out:$line"; echo "err:$FOO" >&2; exit 3'], { env: { PATH: process.env.PATH, FOO: "bar" } });
    child.stdin.write(new TextEncoder().encode("ping\n"));
    await child.stdin.flush();
    child.stdin.end();
    const [stdout, stderr, code] = await Promise.all([text(child.stdout), text(child.stderr), child.exited]);
    expect({ stdout, stderr, code, exitCode: child.exitCode }).toEqual({ stdout: "out:ping\n", stderr: "err:bar\n", code: 3, exitCode: 3 });
    expect(child.pid).toBeGreaterThan(0);
  });

  test("spawnPiped: the environment is exactly the one given, and cwd is honoured", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ctxr-runtime-"));
    try {
      const child = spawnPiped(["/bin/sh", "-c", 'echo "$PWD ${HOME:-no-home}"'], { env: { PATH: "/usr/bin:/bin" }, cwd: dir });
      expect((await text(child.stdout)).trim()).toBe(`${dir} no-home`);
      await child.exited;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("kill: a killed child reports its signal and no exit code; killing it again does nothing", async () => {
    const child = spawnPiped(["sleep", "30"], { env: process.env });
    child.kill("SIGKILL");
    await child.exited;
    expect(child.signalCode).toBe("SIGKILL");
    expect(child.exitCode).toBeNull();
    child.kill("SIGKILL");
  });

  test("runSync captures output and the exit code; which finds sh and not a made-up name", () => {
    expect(runSync(["sh", "-c", "echo a; echo b >&2; exit 2"])).toEqual({ exitCode: 2, stdout: "a\n", stderr: "b\n" });
    expect(which("sh")).toMatch(/\/sh$/);
    expect(which("no-such-command-ctxr-test")).toBeNull();
  });

  test("scriptCommand runs a TypeScript file on this runtime", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ctxr-runtime-"));
    try {
      const script = join(dir, "hello.ts");
      writeFileSync(script, 'const n: number = 41;\nconsole.log(`hello ${n + 1}`);\n');
      const child = spawnPiped(scriptCommand(script), { env: process.env });
      expect(await text(child.stdout)).toBe("hello 42\n");
      expect(await child.exited).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

test("readFileBytes reads a whole file", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ctxr-runtime-"));
  try {
    writeFileSync(join(dir, "f"), Uint8Array.of(0, 1, 2, 255));
    expect(Array.from(await readFileBytes(join(dir, "f")))).toEqual([0, 1, 2, 255]);
    await expect(readFileBytes(join(dir, "missing"))).rejects.toThrow();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
