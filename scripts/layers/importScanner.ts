/**
 * Finds the module specifiers a TypeScript file imports, with the line of each: static
 * `import … from`, side-effect `import "…"`, `export … from`, dynamic `import("…")` and
 * `new Worker(new URL("…", import.meta.url))`. Pure: text in, specifiers out.
 *
 * The patterns run over a skeleton of the source: comments blanked and the inside of every string
 * and template literal filled (line breaks kept, so offsets and lines hold), so neither a
 * commented-out import nor text in a string that reads like one counts. The specifier is then
 * read from the source at the matched literal's place.
 */

export interface ImportSite {
  specifier: string;
  /** 1-based line of the specifier. */
  line: number;
}

// Group 1 is the specifier's literal (quotes included) in the skeleton.
const IMPORT_PATTERNS: RegExp[] = [
  // import x from "…", import { a, type B } from "…", import * as m from "…", import type T from "…"
  /\bimport\s+(?:type\s+)?[\w$*\s{},]*?\bfrom\s*("[^"\n]+"|'[^'\n]+')/g,
  // import "…" (side effects only)
  /\bimport\s*("[^"\n]+"|'[^'\n]+')/g,
  // export * from "…", export * as m from "…", export { a, type B } from "…"
  /\bexport\s+(?:type\s+)?(?:\*(?:\s+as\s+[\w$]+)?|\{[\w$\s,]*\})\s*from\s*("[^"\n]+"|'[^'\n]+')/g,
  // import("…") and typeof import("…")
  /\bimport\s*\(\s*("[^"\n]+"|'[^'\n]+')\s*\)/g,
  // new Worker(new URL("…", import.meta.url))
  /\bnew\s+Worker\s*\(\s*new\s+URL\s*\(\s*("[^"\n]+"|'[^'\n]+')/g,
];

export function scanImports(source: string): ImportSite[] {
  const skeleton = codeSkeleton(source);
  const sites = new Map<number, ImportSite>();
  for (const pattern of IMPORT_PATTERNS) {
    for (const match of skeleton.matchAll(pattern)) {
      const literal = match[1]!;
      const start = match.index! + match[0].lastIndexOf(literal) + 1; // just inside the opening quote
      const specifier = source.slice(start, start + literal.length - 2);
      sites.set(start, { specifier, line: lineAt(source, start) });
    }
  }
  return [...sites.entries()].sort(([a], [b]) => a - b).map(([, site]) => site);
}

function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

const FILL = "_";

/** The source with comments blanked and literal contents filled; quotes, code and line breaks as they were. */
export function codeSkeleton(source: string): string {
  const out = source.split("");
  const fill = (from: number, to: number, by: string) => {
    for (let k = from; k < to; k++) if (out[k] !== "\n") out[k] = by;
  };
  let i = 0;
  while (i < source.length) {
    const c = source[i]!;
    const next = source[i + 1];
    if (c === "/" && next === "/") {
      const end = source.indexOf("\n", i);
      const stop = end === -1 ? source.length : end;
      fill(i, stop, " ");
      i = stop;
    } else if (c === "/" && next === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end === -1 ? source.length : end + 2;
      fill(i, stop, " ");
      i = stop;
    } else if (c === '"' || c === "'" || c === "`") {
      const stop = literalEnd(source, i, c);
      fill(i + 1, source[stop - 1] === c ? stop - 1 : stop, FILL);
      i = stop;
    } else {
      i++;
    }
  }
  return out.join("");
}

/** Index just past the literal that opens at `start` (a template's `${…}` parts are skipped whole). */
function literalEnd(source: string, start: number, quote: string): number {
  let i = start + 1;
  let braceDepth = 0;
  while (i < source.length) {
    const c = source[i]!;
    if (c === "\\") {
      i += 2;
      continue;
    }
    if (braceDepth > 0) {
      if (c === "{") braceDepth++;
      else if (c === "}") braceDepth--;
      else if (c === '"' || c === "'" || c === "`") {
        i = literalEnd(source, i, c);
        continue;
      }
      i++;
      continue;
    }
    if (quote === "`" && c === "$" && source[i + 1] === "{") {
      braceDepth = 1;
      i += 2;
      continue;
    }
    if (c === quote) return i + 1;
    if (c === "\n" && quote !== "`") return i + 1; // unterminated: stop at the line's end
    i++;
  }
  return i;
}
