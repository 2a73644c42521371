import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { temporaryTarget, writeAll, writeAllAsync, writeFileAtomically, writeFileAtomicallyAsync } from "../../src/files/atomicFile.ts";
import { tempFolder } from "../helpers/cli.ts";

describe("writeFileAtomically", () => {
  test("replaces the file with the whole new content and the asked mode; no temporary file stays", () => {
    const dir = tempFolder("ctxr-atomic-");
    try {
      const target = join(dir.path, "out.bin");
      writeFileSync(target, "old");
      const bytes = new Uint8Array(3 << 20).map((_, i) => i % 251);
      writeFileAtomically(target, (fd) => writeAll(fd, bytes), { mode: 0o755 });
      expect(Buffer.compare(readFileSync(target), Buffer.from(bytes))).toBe(0);
      expect(statSync(target).mode & 0o777).toBe(0o755);
      expect(readdirSync(dir.path)).toEqual(["out.bin"]);
    } finally {
      dir.cleanup();
    }
  });

  test("a failing writer leaves the old file as it was, removes the temporary file and rethrows its error", () => {
    const dir = tempFolder("ctxr-atomic-");
    try {
      const target = join(dir.path, "out.txt");
      writeFileSync(target, "old");
      expect(() =>
        writeFileAtomically(target, (fd) => {
          writeAll(fd, new TextEncoder().encode("partial"));
          throw new Error("disk on fire");
        }),
      ).toThrow("disk on fire");
      expect(readFileSync(target, "utf8")).toBe("old");
      expect(readdirSync(dir.path)).toEqual(["out.txt"]);
      expect(() => writeFileAtomically(join(dir.path, "missing", "x"), () => {})).toThrow(/ENOENT/);
      expect(existsSync(join(dir.path, "missing"))).toBe(false);
    } finally {
      dir.cleanup();
    }
  });
});

describe("writeFileAtomicallyAsync", () => {
  test("readers see the old file whole while the new one is written, then the new one whole", async () => {
    const dir = tempFolder("ctxr-atomic-");
    try {
      const target = join(dir.path, "snapshot.json");
      writeFileSync(target, "old content");
      const chunk = new Uint8Array(64 * 1024).fill(65);
      const seen: string[] = [];
      await writeFileAtomicallyAsync(target, async (fd) => {
        for (let i = 0; i < 8; i++) {
          await writeAllAsync(fd, chunk);
          seen.push(readFileSync(target, "utf8"));
        }
      });
      expect(seen).toEqual(Array(8).fill("old content"));
      const after = readFileSync(target);
      expect(after.length).toBe(8 * chunk.length);
      expect(after.every((byte) => byte === 65)).toBe(true);
      expect(readdirSync(dir.path)).toEqual(["snapshot.json"]);
    } finally {
      dir.cleanup();
    }
  });

  test("a rejecting writer leaves the old file and no temporary file", async () => {
    const dir = tempFolder("ctxr-atomic-");
    try {
      const target = join(dir.path, "out.txt");
      writeFileSync(target, "old");
      const write = writeFileAtomicallyAsync(target, async (fd) => {
        await writeAllAsync(fd, new TextEncoder().encode("partial"));
        throw new Error("disk on fire");
      }, { durable: false });
      await expect(write).rejects.toThrow("disk on fire");
      expect(readFileSync(target, "utf8")).toBe("old");
      expect(readdirSync(dir.path)).toEqual(["out.txt"]);
    } finally {
      dir.cleanup();
    }
  });
});

describe("crash safety", () => {
  test("a process killed while writing leaves the old file whole and a temporary file that temporaryTarget recognises", async () => {
    const dir = tempFolder("ctxr-atomic-");
    try {
      const target = join(dir.path, "index.bin");
      writeFileSync(target, "the old index");
      const script = join(dir.path, "writer.ts");
      const module = resolve(import.meta.dir, "../../src/files/atomicFile.ts");
      writeFileSync(
        script,
        `import { writeAllAsync, writeFileAtomicallyAsync } from ${JSON.stringify(module)};
const chunk = new Uint8Array(256 * 1024).fill(7);
await writeFileAtomicallyAsync(${JSON.stringify(target)}, async (fd) => {
  for (let i = 0; ; i++) {
    await writeAllAsync(fd, chunk);
    if (i === 3) console.log("writing");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
});
`,
      );
      const child = Bun.spawn([process.execPath, script], { stdout: "pipe", stderr: "inherit" });
      const reader = child.stdout.getReader();
      let output = "";
      while (!output.includes("writing")) {
        const { value, done } = await reader.read();
        if (done) break;
        output += new TextDecoder().decode(value);
      }
      expect(output).toContain("writing");
      child.kill("SIGKILL");
      await child.exited;
      expect(readFileSync(target, "utf8")).toBe("the old index");
      const others = readdirSync(dir.path).filter((name) => name !== "index.bin" && name !== "writer.ts");
      expect(others.length).toBe(1);
      expect(temporaryTarget(others[0]!)).toBe("index.bin");
      expect(statSync(join(dir.path, others[0]!)).size).toBeGreaterThanOrEqual(4 * 256 * 1024);
    } finally {
      dir.cleanup();
    }
  });

  test("temporaryTarget names the target of a temporary file and nothing else", () => {
    expect(temporaryTarget(".snapshot-1.json.123.0.tmp")).toBe("snapshot-1.json");
    expect(temporaryTarget(".a.b.ctxkv.9.42.tmp")).toBe("a.b.ctxkv");
    expect(temporaryTarget("snapshot-1.json.tmp")).toBeNull();
    expect(temporaryTarget(".x.tmp")).toBeNull();
    expect(temporaryTarget("index.bin")).toBeNull();
  });
});
