import { describe, expect, test } from "bun:test";
import { downloadProgress } from "../../src/cli/downloadProgress.ts";

describe("download progress off a terminal", () => {
  test("plain lines: the start (with what a resume already has), notes, and the end with the bytes of this run", () => {
    const lines: string[] = [];
    const progress = downloadProgress(false, (text) => void lines.push(text));
    progress.start("m-Q4_K_M.gguf", 3 * 2 ** 20, 2 ** 20);
    progress.advance(2 ** 19);
    progress.note("m-Q4_K_M.gguf: the connection broke at 1.5 MiB of 3.0 MiB; resuming (try 2 of 5)");
    progress.advance(2 ** 19 + 2 ** 20);
    progress.end("m-Q4_K_M.gguf");
    expect(lines.length).toBe(3);
    expect(lines[0]).toBe("ctxr: downloading m-Q4_K_M.gguf (3.0 MiB), 1.0 MiB already here\n");
    expect(lines[1]).toBe("ctxr: m-Q4_K_M.gguf: the connection broke at 1.5 MiB of 3.0 MiB; resuming (try 2 of 5)\n");
    expect(lines[2]).toMatch(/^ctxr: downloaded m-Q4_K_M\.gguf: 2\.0 MiB in \d+\.\d s; checking its checksum\n$/);
  });

  test("a file of unknown size", () => {
    const lines: string[] = [];
    const progress = downloadProgress(true, (text) => void lines.push(text)); // no size: no bar even on a terminal
    progress.start("config.json", null, 0);
    progress.end("config.json");
    expect(lines[0]).toBe("ctxr: downloading config.json\n");
  });
});
