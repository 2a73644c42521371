/**
 * `$ref` cycles in a JSON schema: a schema that is, through `$ref`s and the branches of
 * `anyOf`/`oneOf`/`allOf` (none of which adds a character to the text), its own definition, such
 * as `{"$ref": "#"}` or `a → b → a` through `$defs`. Such a schema has no text that ends: xgrammar
 * compiles it to a grammar that allows no token at all. Recursion under `properties` or `items`
 * (a tree) is fine: each level adds text. Pure.
 */

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

/** The value at a local JSON pointer ("#", "#/$defs/a"), or undefined. */
function resolve(root: unknown, ref: string): unknown {
  if (!ref.startsWith("#")) return undefined;
  let pointer: string;
  try {
    pointer = decodeURIComponent(ref.slice(1));
  } catch {
    return undefined;
  }
  if (pointer === "") return root;
  if (!pointer.startsWith("/")) return undefined;
  let node = root;
  for (const raw of pointer.slice(1).split("/")) {
    const segment = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (Array.isArray(node)) node = node[Number(segment)];
    else if (isObject(node)) node = Object.hasOwn(node, segment) ? node[segment] : undefined;
    else return undefined;
  }
  return node;
}

/** Where a schema node leads without adding text: its `$ref`'s target and its union/intersection branches. */
function successors(root: unknown, node: Record<string, unknown>): { next: Record<string, unknown>; via: string }[] {
  const out: { next: Record<string, unknown>; via: string }[] = [];
  if (typeof node.$ref === "string") {
    const target = resolve(root, node.$ref);
    if (isObject(target)) out.push({ next: target, via: node.$ref });
  }
  for (const keyword of ["anyOf", "oneOf", "allOf"]) {
    const branches = node[keyword];
    if (Array.isArray(branches)) branches.forEach((branch, i) => isObject(branch) && out.push({ next: branch, via: `${keyword}[${i}]` }));
  }
  return out;
}

/** Every object in the schema (iteratively: a deep schema must not overflow the stack). */
function objectsOf(schema: unknown): Record<string, unknown>[] {
  const found: Record<string, unknown>[] = [];
  const stack: unknown[] = [schema];
  while (stack.length > 0) {
    const value = stack.pop();
    if (Array.isArray(value)) for (const child of value) stack.push(child);
    else if (isObject(value)) {
      found.push(value);
      for (const child of Object.values(value)) stack.push(child);
    }
  }
  return found;
}

/** The first `$ref` cycle, as the refs and branches that make it ("#/$defs/a → #/$defs/b → #/$defs/a"), or null. */
export function findRefCycle(schema: unknown): string | null {
  if (!isObject(schema)) return null;
  const state = new Map<Record<string, unknown>, "open" | "done">();
  for (const start of objectsOf(schema)) {
    if (state.has(start)) continue;
    // Iterative depth-first search; `path` holds the open nodes and how each was reached.
    const path: { node: Record<string, unknown>; via: string; edges: { next: Record<string, unknown>; via: string }[] }[] = [];
    state.set(start, "open");
    path.push({ node: start, via: "", edges: successors(schema, start) });
    while (path.length > 0) {
      const top = path[path.length - 1]!;
      const edge = top.edges.pop();
      if (edge === undefined) {
        state.set(top.node, "done");
        path.pop();
        continue;
      }
      const seen = state.get(edge.next);
      if (seen === "open") {
        const from = path.findIndex((entry) => entry.node === edge.next);
        const steps = [...path.slice(from + 1).map((entry) => entry.via), edge.via];
        return steps.some((step) => step.startsWith("#")) ? steps.join(" → ") : null;
      }
      if (seen === undefined) {
        state.set(edge.next, "open");
        path.push({ node: edge.next, via: edge.via, edges: successors(schema, edge.next) });
      }
    }
  }
  return null;
}
