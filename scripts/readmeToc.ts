/**
 * The README's table of contents: its ## and ### headings as links, written
 * between the <!-- toc --> and <!-- /toc --> markers, with GitHub's heading
 * anchors. `bun scripts/readmeToc.ts` rewrites README.md; `--check` only
 * says whether it is current (exit 1 if not).
 */
import { readFileSync, writeFileSync } from "node:fs";

export interface Heading {
  level: number;
  text: string;
  anchor: string;
}

const TOC_START = "<!-- toc -->";
const TOC_END = "<!-- /toc -->";

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
export function headingAnchor(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/ /g, "-");
}

/** The headings outside code blocks, each anchor numbered as GitHub numbers repeats (-1, -2). */
export function readmeHeadings(markdown: string): Heading[] {
  const headings: Heading[] = [];
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of markdown.split("\n")) {
    if (/^(```|~~~)/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const match = /^(#{1,6}) (.+?)\s*$/.exec(line);
    if (match === null) continue;
    const base = headingAnchor(match[2]!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    headings.push({ level: match[1]!.length, text: match[2]!, anchor: count === 0 ? base : `${base}-${count}` });
  }
  return headings;
}

/** The ## and ### headings but the table of contents' own, as a nested list. */
export function renderToc(markdown: string): string {
  return readmeHeadings(markdown)
    .filter((heading) => (heading.level === 2 || heading.level === 3) && heading.text !== "Contents")
    .map((heading) => `${heading.level === 3 ? "  " : ""}- [${heading.text.replace(/`/g, "")}](#${heading.anchor})`)
    .join("\n");
}

export function withToc(markdown: string): string {
  const start = markdown.indexOf(TOC_START);
  const end = markdown.indexOf(TOC_END);
  if (start < 0 || end < start) throw new Error(`no ${TOC_START} … ${TOC_END} markers`);
  return `${markdown.slice(0, start + TOC_START.length)}\n${renderToc(markdown)}\n${markdown.slice(end)}`;
}

/** Links to #anchors that no heading has. */
export function brokenAnchors(markdown: string): string[] {
  const anchors = new Set(readmeHeadings(markdown).map((heading) => heading.anchor));
  return [...markdown.matchAll(/\]\(#([^)]+)\)/g)].map((match) => match[1]!).filter((anchor) => !anchors.has(anchor));
}

if (import.meta.main) {
  const path = new URL("../README.md", import.meta.url).pathname;
  const text = readFileSync(path, "utf8");
  const updated = withToc(text);
  if (process.argv.includes("--check")) {
    if (updated !== text) {
      console.error("README.md: the table of contents is out of date: run bun scripts/readmeToc.ts");
      process.exit(1);
    }
  } else if (updated !== text) {
    writeFileSync(path, updated);
  }
  const broken = brokenAnchors(updated);
  if (broken.length > 0) {
    console.error(`README.md: links to missing headings: ${broken.map((anchor) => `#${anchor}`).join(", ")}`);
    process.exit(1);
  }
}
