/**
 * A strict parser of the Prometheus text exposition format 0.0.4, for checking what /metrics
 * answers: it throws, naming the line, on anything Prometheus would reject or that breaks the
 * format's rules (bad names, unescaped or unknown escapes in label values, values that are not
 * Prometheus numbers, a family's lines split up or its TYPE after its samples, a repeated series,
 * histogram buckets that are not cumulative or lack `le="+Inf"`, `_count` unlike the +Inf bucket).
 */

export type ParsedType = "counter" | "gauge" | "histogram" | "summary" | "untyped";

export interface ParsedSample {
  /** The sample's own name (a histogram's `x_bucket`, `x_sum`, `x_count`). */
  name: string;
  labels: Record<string, string>;
  value: number;
  line: number;
}

export interface ParsedFamily {
  name: string;
  type: ParsedType;
  help: string | null;
  samples: ParsedSample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set<ParsedType>(["counter", "gauge", "histogram", "summary", "untyped"]);
const FLOAT = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

export class PrometheusFormatError extends Error {}

export function parsePrometheusText(text: string): Map<string, ParsedFamily> {
  if (text.length > 0 && !text.endsWith("\n")) throw new PrometheusFormatError("the text must end with a line feed");
  const families = new Map<string, ParsedFamily>();
  const finished = new Set<string>();
  const typed = new Set<string>();
  let current: ParsedFamily | null = null;
  const lines = text.split("\n");
  lines.pop();

  const familyFor = (name: string, lineNo: number): ParsedFamily => {
    if (current !== null && current.name === name) return current;
    if (current !== null) finished.add(current.name);
    if (finished.has(name)) throw new PrometheusFormatError(`line ${lineNo}: the lines of ${name} are not together`);
    current = { name, type: "untyped", help: null, samples: [] };
    families.set(name, current);
    return current;
  };

  lines.forEach((line, index) => {
    const lineNo = index + 1;
    if (line.trim() === "") return;
    if (line.startsWith("#")) {
      const match = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s(.*))?$/.exec(line);
      if (match === null) return; // a plain comment
      const [, keyword, name, rest = ""] = match as unknown as [string, string, string, string | undefined];
      if (!METRIC_NAME.test(name)) throw new PrometheusFormatError(`line ${lineNo}: invalid metric name ${JSON.stringify(name)}`);
      const family = familyFor(name, lineNo);
      if (keyword === "HELP") {
        if (family.help !== null) throw new PrometheusFormatError(`line ${lineNo}: a second HELP for ${name}`);
        family.help = unescapeHelp(rest, lineNo);
      } else {
        const type = rest.trim() as ParsedType;
        if (!TYPES.has(type)) throw new PrometheusFormatError(`line ${lineNo}: unknown type ${JSON.stringify(rest)} for ${name}`);
        if (family.samples.length > 0) throw new PrometheusFormatError(`line ${lineNo}: TYPE of ${name} after its samples`);
        if (typed.has(name)) throw new PrometheusFormatError(`line ${lineNo}: a second TYPE for ${name}`);
        typed.add(name);
        family.type = type;
      }
      return;
    }
    const sample = parseSampleLine(line, lineNo);
    const family = familyFor(familyNameOf(sample.name, current), lineNo);
    if (family.samples.some((s) => s.name === sample.name && sameLabels(s.labels, sample.labels))) {
      throw new PrometheusFormatError(`line ${lineNo}: the series ${sample.name}${JSON.stringify(sample.labels)} appears twice`);
    }
    family.samples.push(sample);
  });

  for (const family of families.values()) checkFamily(family);
  return families;
}

/** The family a sample belongs to: a histogram's or summary's suffixed samples belong to the open family. */
function familyNameOf(sampleName: string, current: ParsedFamily | null): string {
  if (current !== null && (current.type === "histogram" || current.type === "summary")) {
    for (const suffix of ["_bucket", "_sum", "_count"]) {
      if (sampleName === current.name + suffix) return current.name;
    }
  }
  return sampleName;
}

function parseSampleLine(line: string, lineNo: number): ParsedSample {
  const nameMatch = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
  if (nameMatch === null) throw new PrometheusFormatError(`line ${lineNo}: expected a metric name: ${JSON.stringify(line)}`);
  const name = nameMatch[0];
  let at = name.length;
  const labels: Record<string, string> = {};
  if (line[at] === "{") {
    at++;
    while (line[at] !== "}") {
      const labelMatch = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(line.slice(at));
      if (labelMatch === null) throw new PrometheusFormatError(`line ${lineNo}: expected a label name at column ${at + 1}`);
      const labelName = labelMatch[0];
      if (!LABEL_NAME.test(labelName)) throw new PrometheusFormatError(`line ${lineNo}: invalid label name ${labelName}`);
      if (labelName in labels) throw new PrometheusFormatError(`line ${lineNo}: label ${labelName} given twice`);
      at += labelName.length;
      if (line.slice(at, at + 2) !== '="') throw new PrometheusFormatError(`line ${lineNo}: expected =" after label ${labelName}`);
      at += 2;
      let value = "";
      for (;;) {
        const c = line[at];
        if (c === undefined) throw new PrometheusFormatError(`line ${lineNo}: unterminated value of label ${labelName}`);
        if (c === '"') break;
        if (c === "\\") {
          const escaped = line[at + 1];
          if (escaped === "\\") value += "\\";
          else if (escaped === '"') value += '"';
          else if (escaped === "n") value += "\n";
          else throw new PrometheusFormatError(`line ${lineNo}: unknown escape \\${escaped ?? ""} in label ${labelName}`);
          at += 2;
          continue;
        }
        value += c;
        at++;
      }
      at++; // the closing quote
      labels[labelName] = value;
      if (line[at] === ",") at++;
      else if (line[at] !== "}") throw new PrometheusFormatError(`line ${lineNo}: expected , or } after label ${labelName}`);
    }
    at++;
  }
  const rest = line.slice(at);
  const valueMatch = /^ (\S+)(?: (-?\d+))?$/.exec(rest);
  if (valueMatch === null) throw new PrometheusFormatError(`line ${lineNo}: expected " value [timestamp]" after ${name}, got ${JSON.stringify(rest)}`);
  return { name, labels, value: parseValue(valueMatch[1]!, lineNo), line: lineNo };
}

function parseValue(text: string, lineNo: number): number {
  if (text === "NaN") return NaN;
  if (text === "+Inf" || text === "Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  if (!FLOAT.test(text)) throw new PrometheusFormatError(`line ${lineNo}: ${JSON.stringify(text)} is not a Prometheus number`);
  return Number(text);
}

function unescapeHelp(text: string, lineNo: number): string {
  return text.replace(/\\(.?)/g, (_, c: string) => {
    if (c === "\\") return "\\";
    if (c === "n") return "\n";
    throw new PrometheusFormatError(`line ${lineNo}: unknown escape \\${c} in HELP`);
  });
}

function sameLabels(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => a[key] === b[key]);
}

function checkFamily(family: ParsedFamily): void {
  if (family.type === "counter") {
    for (const s of family.samples) {
      if (!(s.value >= 0)) throw new PrometheusFormatError(`line ${s.line}: counter ${s.name} is ${s.value}`);
    }
  }
  if (family.type !== "histogram") {
    for (const s of family.samples) {
      if (s.name !== family.name) throw new PrometheusFormatError(`line ${s.line}: sample ${s.name} inside family ${family.name}`);
    }
    return;
  }
  // A histogram: per label set (without le), buckets by increasing le, cumulative, ending at +Inf = _count.
  const series = new Map<string, { buckets: { le: number; value: number; line: number }[]; count?: number; sum?: number; line: number }>();
  for (const s of family.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const entry = series.get(key) ?? { buckets: [], line: s.line };
    series.set(key, entry);
    if (s.name === `${family.name}_bucket`) {
      if (le === undefined) throw new PrometheusFormatError(`line ${s.line}: bucket of ${family.name} without le`);
      entry.buckets.push({ le: parseValue(le, s.line), value: s.value, line: s.line });
    } else if (s.name === `${family.name}_count`) entry.count = s.value;
    else if (s.name === `${family.name}_sum`) entry.sum = s.value;
    else throw new PrometheusFormatError(`line ${s.line}: sample ${s.name} inside histogram ${family.name}`);
  }
  for (const entry of series.values()) {
    const { buckets } = entry;
    for (let i = 1; i < buckets.length; i++) {
      if (!(buckets[i]!.le > buckets[i - 1]!.le)) throw new PrometheusFormatError(`line ${buckets[i]!.line}: buckets of ${family.name} not in increasing le`);
      if (buckets[i]!.value < buckets[i - 1]!.value) throw new PrometheusFormatError(`line ${buckets[i]!.line}: buckets of ${family.name} not cumulative`);
    }
    const last = buckets.at(-1);
    if (last === undefined || last.le !== Infinity) throw new PrometheusFormatError(`line ${entry.line}: histogram ${family.name} has no le="+Inf" bucket`);
    if (entry.count === undefined || entry.sum === undefined) throw new PrometheusFormatError(`line ${entry.line}: histogram ${family.name} lacks _sum or _count`);
    if (entry.count !== last.value) throw new PrometheusFormatError(`line ${last.line}: ${family.name}_count ${entry.count} is not its +Inf bucket ${last.value}`);
  }
}
