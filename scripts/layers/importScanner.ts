/**
 * Finds the module specifiers a TypeScript file imports, with the line of each: static
 * `import … from`, side-effect `import "…"`, `export … from`, dynamic `import("…")` and
 * `new Worker(new URL("…", import.meta.url))`. Pure: text in, specifiers out.
 *
 * Comments are blanked first (keeping line breaks, so line numbers hold) by a small lexer that
 * knows string and template literals, so a `//` inside "http://…" is not taken for a comment.
 */

export interface ImportSite {
  specifier: string;
  /** 1-based line of the specifier. */
  line: number;
}

const IMPORT_PATTERNS: RegExp[] = [
  // import x from "…", import { a, type B } from "…", import * as m from "…", import type T from "…"
  /\bimport\s+(?:type\s+)?[\w$*\s{},]*?\bfrom\s*(["'])([^"'\n]+)\1/g,
  // import "…" (side effects only)
  /\bimport\s*(["'])([^"'\n]+)\1/g,
  // export * from "…", export * as m from "…", export { a, type B } from "…"
  /\bexport\s+(?:type\s+)?(?:\*(?:\s+as\s+[\w$]+)?|\{[\w$\s,]*\})\s*from\s*(["'])([^"'\n]+)\1/g,
  // import("…") and typeof import("…")
  /\bimport\s*\(\s*(["'])([^"'\n]+)\1\s*\)/g,
  // new Worker(new URL("…", import.meta.url))
  /\bnew\s+Worker\s*\(\s*new\s+URL\s*\(\s*(["'])([^"'\n]+)\1/g,
];

export function scanImports(source: string): ImportSite[] {
  const code = blankComments(source);
  const sites = new Map<number, ImportSite>();
  for (const pattern of IMPORT_PATTERNS) {
    for (const match of code.matchAll(pattern)) {
      const specifier = match[2]!;
      const offset = match.index! + match[0].lastIndexOf(specifier);
      // Two patterns can match the same specifier (e.g. `import "x"` inside a longer form): keep one.
      sites.set(offset, { specifier, line: lineAt(code, offset) });
    }
  }
  return [...sites.entries()].sort(([a], [b]) => a - b).map(([, site]) => site);
}

function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/** The source with every comment replaced by spaces (line breaks kept); strings left as they are. */
export function blankComments(source: string): string {
  const out = source.split("");
  let i = 0;
  const n = source.length;
  const blank = (from: number, to: number) => {
    for (let k = from; k < to; k++) if (out[k] !== "\n") out[k] = " ";
  };
  while (i < n) {
    const c = source[i]!;
    const next = source[i + 1];
    if (c === "/" && next === "/") {
      const end = source.indexOf("\n", i);
      const stop = end === -1 ? n : end;
      blank(i, stop);
      i = stop;
    } else if (c === "/" && next === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end === -1 ? n : end + 2;
      blank(i, stop);
      i = stop;
    } else if (c === '"' || c === "'" || c === "`") {
      i = skipString(source, i, c);
    } else {
      i++;
    }
  }
  return out.join("");
}

/** Index just past the literal that opens at `start` (template `${…}` parts are skipped whole). */
function skipString(source: string, start: number, quote: string): number {
  let i = start + 1;
  let braceDepth = 0;
  while (i < source.length) {
    const c = source[i]!;
    if (c === "\\") {
      i += 2;
      continue;
    }
    if (quote === "`" && braceDepth === 0 && c === "$" && source[i + 1] === "{") {
      braceDepth = 1;
      i += 2;
      continue;
    }
    if (braceDepth > 0) {
      if (c === "{") braceDepth++;
      else if (c === "}") braceDepth--;
      else if (c === '"' || c === "'" || c === "`") {
        i = skipString(source, i, c);
        continue;
      }
      i++;
      continue;
    }
    if (c === quote) return i + 1;
    if (c === "\n" && quote !== "`") return i + 1; // unterminated: stop at the line's end
    i++;
  }
  return i;
}
