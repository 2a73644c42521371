import { describe, expect, test } from "bun:test";
import { findRefCycle } from "../../../src/engine/grammar/jsonSchemaRefCycles.ts";

/** A schema nested `depth` levels under properties, with `leaf` at the bottom. */
function deepSchema(depth: number, leaf: Record<string, unknown>): Record<string, unknown> {
  let schema = leaf;
  for (let i = 0; i < depth; i++) schema = { type: "object", properties: { x: schema } };
  return schema;
}

describe("findRefCycle", () => {
  test("a schema that is its own $ref is a cycle", () => {
    expect(findRefCycle({ $ref: "#" })).toBe("#");
  });

  test("a cycle through $defs names every ref on it", () => {
    const schema = { $ref: "#/$defs/a", $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } } };
    const cycle = findRefCycle(schema);
    expect(cycle).not.toBeNull();
    expect(cycle!.split(" → ").sort()).toEqual(["#/$defs/a", "#/$defs/b"]);
    // A cycle that nothing reaches from the root is still found (its definitions are compiled too).
    expect(findRefCycle({ type: "string", $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } } })).not.toBeNull();
  });

  test("anyOf, oneOf and allOf branches add no text: a ref back through them is a cycle", () => {
    for (const keyword of ["anyOf", "oneOf", "allOf"]) {
      const schema = { $defs: { a: { [keyword]: [{ type: "string" }, { $ref: "#/$defs/a" }] } }, $ref: "#/$defs/a" };
      const cycle = findRefCycle(schema);
      expect(cycle).toContain(`${keyword}[1]`);
      expect(cycle).toContain("#/$defs/a");
    }
  });

  test("recursion under properties or items (a tree: each level adds text) is not a cycle", () => {
    const tree = { type: "object", properties: { name: { type: "string" }, children: { type: "array", items: { $ref: "#" } } } };
    expect(findRefCycle(tree)).toBeNull();
    const list = { $defs: { node: { type: "object", properties: { next: { anyOf: [{ type: "null" }, { $ref: "#/$defs/node" }] } } } }, $ref: "#/$defs/node" };
    expect(findRefCycle(list)).toBeNull();
  });

  test("JSON pointers: ~1 and ~0 escapes, percent-encoding and array indices are followed", () => {
    expect(findRefCycle({ $defs: { "a/b": { $ref: "#/$defs/a~1b" } } })).toBe("#/$defs/a~1b");
    expect(findRefCycle({ $defs: { "a~b": { $ref: "#/$defs/a~0b" } } })).toBe("#/$defs/a~0b");
    expect(findRefCycle({ $defs: { "a b": { $ref: "#/$defs/a%20b" } } })).toBe("#/$defs/a%20b");
    expect(findRefCycle({ anyOf: [{ $ref: "#/anyOf/0" }] })).toBe("#/anyOf/0");
  });

  test("refs it cannot follow are no cycle and never throw: missing targets, remote refs, bad escapes, non-object targets", () => {
    for (const ref of ["#/$defs/missing", "https://example.com/schema.json", "#%E0%A4%A", "#nopointer", "#/$defs/flag", "#/$defs/list/7"]) {
      expect(findRefCycle({ $ref: ref, $defs: { flag: true, list: [] } })).toBeNull();
    }
    expect(findRefCycle(true)).toBeNull();
    expect(findRefCycle(null)).toBeNull();
    expect(findRefCycle([{ $ref: "#" }])).toBeNull();
  });

  test("a schema 20,000 levels deep is searched without overflowing the stack", () => {
    expect(findRefCycle(deepSchema(20_000, { type: "string" }))).toBeNull();
    const deep = deepSchema(20_000, { $ref: "#/$defs/a" });
    expect(findRefCycle(deep)).toBeNull();
    expect(findRefCycle({ ...deep, $defs: { a: { $ref: "#/$defs/a" } } })).toBe("#/$defs/a");
  });
});
