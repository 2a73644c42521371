/**
 * The metric and label names a PromQL expression refers to, for checking a dashboard against what
 * /metrics exports. Not a PromQL parser: it drops strings, range and offset brackets, then reads
 * label names from `{...}` matchers and `by`/`without`/`on`/`ignoring`/`group_*` lists, and takes
 * every other identifier not followed by "(" (a function or aggregation) as a metric name.
 */
const KEYWORDS = new Set(["by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool", "inf", "nan"]);

export interface PromqlNames {
  metrics: string[];
  labels: string[];
}

export function promqlNames(expression: string): PromqlNames {
  const labels = new Set<string>();
  const metrics = new Set<string>();
  let text = expression.replace(/\$\{?\w+\}?/g, "0").replace(/\[[^\]]*\]/g, " ");
  text = text.replace(/\{([^}]*)\}/g, (_, matchers: string) => {
    for (const match of matchers.matchAll(/([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"/g)) labels.add(match[1]!);
    return " ";
  });
  text = text.replace(/"(?:[^"\\]|\\.)*"/g, " ");
  text = text.replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g, (_, list: string) => {
    for (const name of list.split(",").map((part) => part.trim()).filter(Boolean)) labels.add(name);
    return " ";
  });
  for (const match of text.matchAll(/(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?/g)) {
    if (match[2] !== undefined || KEYWORDS.has(match[1]!.toLowerCase())) continue;
    metrics.add(match[1]!);
  }
  return { metrics: [...metrics], labels: [...labels] };
}
