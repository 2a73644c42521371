/**
 * How deeply a parsed JSON value nests, checked without recursion (an explicit
 * stack), so that a body nested 100,000 levels deep is refused before any
 * recursive code (JSON.stringify, hashing, validation) sees it. The body
 * itself is level 1; every array or object inside adds one.
 */

export type JsonPath = (string | number)[];

export interface DepthProblem {
  /** The field to name: the start of the too-deep value's path (see depthField). */
  field: string;
  message: string;
  /** The full path of the first array or object past the limit. */
  path: JsonPath;
}

/** The path of the first array or object nested deeper than `maxDepth` levels (depth first), or null. */
export function findTooDeep(value: unknown, maxDepth: number): JsonPath | null {
  if (value === null || typeof value !== "object") return null;
  // Each entry: a container, its depth, and the key that led to it (with its parent's entry index).
  const containers: { value: object; depth: number; key: string | number | null; parent: number }[] = [{ value, depth: 1, key: null, parent: -1 }];
  const pending: number[] = [0];
  while (pending.length > 0) {
    const at = pending.pop()!;
    const entry = containers[at]!;
    if (entry.depth > maxDepth) return pathOf(containers, at);
    const children: [string | number, unknown][] = Array.isArray(entry.value) ? entry.value.map((child, i) => [i, child]) : Object.entries(entry.value);
    // Pushed in reverse so the first child is looked at first.
    for (let i = children.length - 1; i >= 0; i--) {
      const [key, child] = children[i]!;
      if (child === null || typeof child !== "object") continue;
      containers.push({ value: child, depth: entry.depth + 1, key, parent: at });
      pending.push(containers.length - 1);
    }
  }
  return null;
}

function pathOf(containers: { key: string | number | null; parent: number }[], at: number): JsonPath {
  const path: JsonPath = [];
  for (let i = at; containers[i]!.parent >= 0; i = containers[i]!.parent) path.push(containers[i]!.key!);
  return path.reverse();
}

/**
 * The field a too-deep path is reported as: its first four steps, cut after
 * the last named key among them (["messages", 0, "content", 0, 0, ...] ->
 * "messages[0].content"), in path notation.
 */
export function depthField(path: JsonPath): string {
  const head = path.slice(0, 4);
  let end = head.length;
  for (let i = head.length - 1; i >= 0; i--) {
    if (typeof head[i] === "string") {
      end = i + 1;
      break;
    }
  }
  return pathNotation(head.slice(0, end));
}

/** ["messages", 0, "content"] -> "messages[0].content"; [] -> "body". */
export function pathNotation(path: JsonPath): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += /^[A-Za-z_$][\w$]*$/.test(key) ? (out === "" ? key : `.${key}`) : `[${JSON.stringify(key)}]`;
  }
  return out === "" ? "body" : out;
}

/** What to answer for a value nested deeper than `maxDepth` levels, or null when it is not. */
export function depthProblem(value: unknown, maxDepth: number): DepthProblem | null {
  const path = findTooDeep(value, maxDepth);
  if (path === null) return null;
  const field = depthField(path);
  return { field, message: `${field}: nested deeper than ${maxDepth} levels`, path };
}
