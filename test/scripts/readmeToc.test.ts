/** The README's table of contents and links (scripts/readmeToc.ts), and what its quick starts must hold. */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { brokenAnchors, headingAnchor, readmeHeadings, renderToc, withToc } from "../../scripts/readmeToc.ts";
import { REPO_ROOT } from "../helpers/cli.ts";

const README = readFileSync(join(REPO_ROOT, "README.md"), "utf8");

describe("readme table of contents", () => {
  test("anchors as GitHub makes them: lower case, punctuation dropped, spaces to hyphens, repeats numbered", () => {
    expect(headingAnchor("`ctxr serve --upstream` — a drop-in proxy")).toBe("ctxr-serve---upstream--a-drop-in-proxy");
    expect(headingAnchor("1. Offline: reorder a batch (`ctxr index build`)")).toBe("1-offline-reorder-a-batch-ctxr-index-build");
    const headings = readmeHeadings("# Top\n## KV events\n```sh\n## not a heading\n```\n### KV events\n");
    expect(headings.map((heading) => heading.anchor)).toEqual(["top", "kv-events", "kv-events-1"]);
  });

  test("the contents list ## and ### headings, nested, and broken links are found", () => {
    const markdown = "# T\n## Contents\n<!-- toc -->\nold\n<!-- /toc -->\n## A `b`\n### C\n#### D\n[x](#a-b) [y](#nowhere)\n";
    expect(renderToc(markdown)).toBe("- [A b](#a-b)\n  - [C](#c)");
    expect(withToc(markdown)).toContain("<!-- toc -->\n- [A b](#a-b)\n  - [C](#c)\n<!-- /toc -->");
    expect(brokenAnchors(markdown)).toEqual(["nowhere"]);
    expect(() => withToc("# no markers")).toThrow("no <!-- toc -->");
  });

  test("README.md: its contents are current (bun scripts/readmeToc.ts) and every #link has its heading", () => {
    expect(withToc(README) === README).toBe(true);
    expect(brokenAnchors(README)).toEqual([]);
  });

  test("README.md: a quick start for each of the four uses, each with a curl, an openai-SDK example and their output", () => {
    const quickStart = README.slice(README.indexOf("## Quick start"), README.indexOf("\n## ", README.indexOf("## Quick start") + 1));
    const uses = quickStart.split("\n### ").slice(1);
    expect(uses.map((use) => use.split("\n")[0])).toEqual([
      "1. Offline: reorder a batch (`ctxr index build`)",
      "2. Online: the reorder API (`ctxr serve`)",
      "3. Proxy in front of vLLM (`ctxr serve --upstream`)",
      "4. Serve a GGUF model (`ctxr serve --model`)",
    ]);
    for (const use of uses) {
      const blocks = [...use.matchAll(/```(\w*)\n([\s\S]*?)```/g)].map((match) => ({ lang: match[1]!, body: match[2]! }));
      const curl = blocks.findIndex((block) => block.lang === "sh" && /curl -s .*http:\/\/127\.0\.0\.1:/.test(block.body));
      const sdk = blocks.findIndex((block) => block.lang === "js" && block.body.includes('import OpenAI from "openai"'));
      expect({ use: use.split("\n")[0], curl: curl >= 0, sdk: sdk >= 0 }).toEqual({ use: use.split("\n")[0], curl: true, sdk: true });
      // Each is followed by a plain block: what it printed.
      expect(blocks[curl + 1]?.lang).toBe("");
      expect(blocks[sdk + 1]?.lang).toBe("");
    }
  });

  test("README.md: a glossary line for each paper term and each use of 'block'", () => {
    const glossary = README.slice(README.indexOf("## Glossary"), README.indexOf("\n## ", README.indexOf("## Glossary") + 1));
    for (const term of ["ContextPilot", "Cache-Craft", "ProphetKV", "CHESS", "Strata", "CFO", "CCI", "β′", "varentropy", "entropy", "document", "KV block", "chunk", "context"]) {
      expect({ term, defined: glossary.includes(`- **${term}**`) }).toEqual({ term, defined: true });
    }
  });

  test("README.md: every guide in docs/ is linked from it", () => {
    const docs = existsSync(join(REPO_ROOT, "docs")) ? readdirSync(join(REPO_ROOT, "docs")).filter((name) => name.endsWith(".md")) : [];
    for (const doc of docs) expect({ doc, linked: README.includes(`](docs/${doc})`) }).toEqual({ doc, linked: true });
  });
});
