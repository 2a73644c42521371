/**
 * Checks that the imports in a source tree follow the layer order: no import from a lower layer
 * up to a higher one, and no two files that import each other.
 *
 *   bun scripts/check-layers.ts [root]     (root defaults to src)
 *
 * Prints `file:line: problem` for each violation and exits 1 when there is any.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { scanImports } from "./layers/importScanner.ts";
import { LAYER_ORDER } from "./layers/layerOrder.ts";
import { checkLayers, formatLayerReport, type ImportEdge, type LayerReport } from "./layers/layerRules.ts";

const SOURCE_FILE = /\.(?:ts|tsx|mts|js|mjs)$/;

export interface ImportGraph {
  /** Source files, relative to the root, with "/" separators. */
  files: string[];
  edges: ImportEdge[];
}

export function readImportGraph(root: string): ImportGraph {
  const absoluteRoot = resolve(root);
  const files = listSourceFiles(absoluteRoot).map((file) => toRootRelative(absoluteRoot, file)!);
  const edges: ImportEdge[] = [];
  for (const file of files) {
    const source = readFileSync(join(absoluteRoot, file), "utf8");
    for (const site of scanImports(source)) {
      if (!site.specifier.startsWith("./") && !site.specifier.startsWith("../")) continue; // a package
      const target = toRootRelative(absoluteRoot, resolve(absoluteRoot, dirname(file), site.specifier));
      if (target === undefined) continue; // outside the tree (wasm/, package.json, …)
      edges.push({ from: file, to: target, line: site.line });
    }
  }
  return { files, edges };
}

export function checkLayersOf(root: string, order: readonly string[] = LAYER_ORDER): LayerReport {
  const graph = readImportGraph(root);
  return checkLayers(graph.files, graph.edges, order);
}

function listSourceFiles(folder: string): string[] {
  const found: string[] = [];
  for (const name of readdirSync(folder).sort()) {
    const path = join(folder, name);
    if (statSync(path).isDirectory()) found.push(...listSourceFiles(path));
    else if (SOURCE_FILE.test(name)) found.push(path);
  }
  return found;
}

function toRootRelative(root: string, path: string): string | undefined {
  const rel = relative(root, path);
  if (rel === "" || rel.startsWith("..")) return undefined;
  return rel.split(sep).join("/");
}

if (import.meta.main) {
  const root = process.argv[2] ?? "src";
  const problems = formatLayerReport(checkLayersOf(root), root.replace(/\/+$/, ""));
  for (const problem of problems) console.log(problem);
  if (problems.length > 0) {
    console.error(`${problems.length} layer violation(s) in ${root}/ (order, bottom to top: ${LAYER_ORDER.join(" → ")})`);
    process.exit(1);
  }
  console.log(`layers ok: ${root}/ follows ${LAYER_ORDER.join(" → ")}`);
}
