/**
 * The layer rules over an import graph: no import from a lower layer up to a higher one, and no
 * two files that import each other. Pure: the graph comes in, the violations go out.
 */

export interface ImportEdge {
  /** Importing file, relative to the source root ("server/app.ts"). */
  from: string;
  /** Imported file, relative to the source root. */
  to: string;
  /** 1-based line of the import in `from`. */
  line: number;
}

export interface UpwardImport extends ImportEdge {
  fromLayer: string;
  toLayer: string;
}

/** Two files that import each other; `line` is where `a` imports `b`, `backLine` where `b` imports `a`. */
export interface TwoFileCircle {
  a: string;
  b: string;
  line: number;
  backLine: number;
}

export interface UnplacedFile {
  file: string;
  layer: string;
}

export interface LayerReport {
  upward: UpwardImport[];
  circles: TwoFileCircle[];
  /** Files whose layer is missing from the order (a new folder must be given a place). */
  unplaced: UnplacedFile[];
}

/** "server/app.ts" → "server"; "version.ts" → "version". */
export function layerOf(file: string): string {
  const slash = file.indexOf("/");
  if (slash !== -1) return file.slice(0, slash);
  return file.replace(/\.[^.]+$/, "");
}

export function checkLayers(files: readonly string[], edges: readonly ImportEdge[], order: readonly string[]): LayerReport {
  const rank = new Map(order.map((layer, index) => [layer, index]));
  const unplaced = files.filter((file) => !rank.has(layerOf(file))).map((file) => ({ file, layer: layerOf(file) }));

  const upward: UpwardImport[] = [];
  for (const edge of edges) {
    const fromLayer = layerOf(edge.from);
    const toLayer = layerOf(edge.to);
    const fromRank = rank.get(fromLayer);
    const toRank = rank.get(toLayer);
    if (fromRank === undefined || toRank === undefined) continue; // reported as unplaced
    if (toRank > fromRank) upward.push({ ...edge, fromLayer, toLayer });
  }

  const firstLine = new Map<string, number>();
  for (const edge of edges) {
    const key = `${edge.from}\u0000${edge.to}`;
    if (!firstLine.has(key)) firstLine.set(key, edge.line);
  }
  const circles: TwoFileCircle[] = [];
  for (const [key, line] of firstLine) {
    const [a, b] = key.split("\u0000") as [string, string];
    if (a >= b) continue; // each pair once, from its alphabetically first file
    const backLine = firstLine.get(`${b}\u0000${a}`);
    if (backLine !== undefined) circles.push({ a, b, line, backLine });
  }

  return { upward, circles, unplaced };
}

/** One line per violation, `file:line: message`, in a stable order; empty when the tree is clean. */
export function formatLayerReport(report: LayerReport, root: string): string[] {
  const lines: string[] = [];
  for (const { file, layer } of report.unplaced) {
    lines.push(`${root}/${file}:1: layer "${layer}" is not in the layer order (scripts/layers/layerOrder.ts)`);
  }
  for (const edge of report.upward) {
    lines.push(`${root}/${edge.from}:${edge.line}: ${edge.fromLayer}/ imports ${edge.to} from the higher layer ${edge.toLayer}/`);
  }
  for (const circle of report.circles) {
    lines.push(`${root}/${circle.a}:${circle.line}: ${circle.a} and ${circle.b} import each other (back at ${root}/${circle.b}:${circle.backLine})`);
  }
  return lines.sort();
}
