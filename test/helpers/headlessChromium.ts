/**
 * A real headless Chromium (Debian's `chromium`, installed by scripts/test-prerequisites.sh) for
 * the status page's test: the DOM after the page's script ran, and a screenshot. Chromium may
 * resolve no host but loopback, so a page that tried the network would fail to load it.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The chromium executable, or null when it is not installed. */
export function findChromium(): string | null {
  return Bun.which("chromium") ?? Bun.which("chromium-browser");
}

/** Virtual time the page gets to run its script and fetches before the DOM is taken. */
const VIRTUAL_TIME_MS = 3000;

async function runChromium(executable: string, args: string[]): Promise<{ stdout: string; stderr: string }> {
  const profile = mkdtempSync(join(tmpdir(), "ctxr-chromium-"));
  try {
    const child = Bun.spawn(
      [
        executable,
        "--headless",
        "--no-sandbox", // tests run as root in containers
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        `--user-data-dir=${profile}`,
        `--virtual-time-budget=${VIRTUAL_TIME_MS}`,
        ...args,
      ],
      { stdout: "pipe", stderr: "pipe", env: { ...process.env, HOME: profile } },
    );
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    if (code !== 0) throw new Error(`chromium exited ${code}: ${stderr.slice(-2000)}`);
    return { stdout, stderr };
  } finally {
    rmSync(profile, { recursive: true, force: true });
  }
}

/** The page's DOM (serialized) once its script has run. */
export async function dumpDom(executable: string, url: string): Promise<string> {
  return (await runChromium(executable, ["--dump-dom", url])).stdout;
}

/** A PNG of the page once its script has run. */
export async function screenshot(executable: string, url: string, path: string, size = { width: 1200, height: 1400 }): Promise<void> {
  await runChromium(executable, [`--screenshot=${path}`, `--window-size=${size.width},${size.height}`, "--hide-scrollbars", url]);
}
