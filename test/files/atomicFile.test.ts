import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { writeAll, writeFileAtomically } from "../../src/files/atomicFile.ts";
import { tempFolder } from "../helpers/cli.ts";

describe("writeFileAtomically", () => {
  test("replaces the file with the whole new content and the asked mode; no temporary file stays", () => {
    const dir = tempFolder("ctxr-atomic-");
    try {
      const target = join(dir.path, "out.bin");
      writeFileSync(target, "old");
      const bytes = new Uint8Array(3 << 20).map((_, i) => i % 251);
      writeFileAtomically(target, (fd) => writeAll(fd, bytes), 0o755);
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
