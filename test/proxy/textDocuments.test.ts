import { describe, expect, test } from "bun:test";
import { findTextDocuments, renderTextDocuments } from "../../src/proxy/documents/textDocuments.ts";

describe("findTextDocuments / renderTextDocuments", () => {
  test("XML documents inside <documents>: reordered, one deduplicated, annotation after the wrapper", () => {
    const text = 'Use these:\n<documents>\n<document id="a">Alpha</document>\n<document id="b">Beta</document>\n<document>Gamma</document>\n</documents>\nQuestion: why?';
    const found = findTextDocuments(text)!;
    expect(found.format).toBe("xml");
    expect(found.documents.map((d) => d.content)).toEqual(["Alpha", "Beta", "Gamma"]);
    expect(renderTextDocuments(found, [0, 1, 2], new Map(), null)).toBe(text);
    const out = renderTextDocuments(found, [2, 0, 1], new Map([[1, "See [Doc 2] above."]]), "Priority: [Doc 2] > [Doc 3] > [Doc 1]");
    expect(out).toBe('Use these:\n<documents>\n<document>Gamma</document>\n<document id="a">Alpha</document>\nSee [Doc 2] above.\n</documents>\nPriority: [Doc 2] > [Doc 3] > [Doc 1]\nQuestion: why?');
  });

  test("bare XML documents: only the first run of adjacent elements", () => {
    const found = findTextDocuments("<document>x</document> <document>y</document>\ntext <document>z</document>")!;
    expect(found.documents.map((d) => d.content)).toEqual(["x", "y"]);
    expect(found.after).toBe("\ntext <document>z</document>");
  });

  test("numbered documents are renumbered by their new position", () => {
    const text = "Context:\n[1] Paris is in France.\n[2] Rome is in Italy.\nIt is old.\n[3] Oslo is in Norway.\n\nWhich is oldest?";
    const found = findTextDocuments(text)!;
    expect(found.format).toBe("numbered");
    expect(found.documents.map((d) => d.content)).toEqual(["Paris is in France.", "Rome is in Italy.\nIt is old.", "Oslo is in Norway."]);
    expect(renderTextDocuments(found, [0, 1, 2], new Map(), null)).toBe(text);
    expect(renderTextDocuments(found, [2, 0, 1], new Map(), "Order: [2] > [3] > [1]")).toBe(
      "Context:\n[1] Oslo is in Norway.\n[2] Paris is in France.\n[3] Rome is in Italy.\nIt is old.\nOrder: [2] > [3] > [1]\n\nWhich is oldest?",
    );
  });

  test("text in other forms is not recognised", () => {
    expect(findTextDocuments("Just a question about [1] and nothing else.")).toBeNull();
    expect(findTextDocuments("[2] starts at two\n[3] then three")).toBeNull();
    expect(findTextDocuments("<doc>not ours</doc>")).toBeNull();
  });
});
