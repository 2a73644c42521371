import { describe, expect, test } from "bun:test";
import { seededRandom } from "../../src/index/seededRandom.ts";
import { dedupAnnotationBytes, docLabelBytes, placeholderCount, priorityAnnotationBytes, utf8Bytes } from "../../src/online/annotationSize.ts";
import { dedupAnnotation, docLabel, priorityAnnotation, type AnnotationTemplates } from "../../src/online/annotations.ts";

const PIECES = ["{order}", "{n}", "{doc}", "$&", "$`", "$'", "$$", "$1", "é", "文", "🙂", " > ", "[", "]", "{", "}", "order", "\n", "\u0001", "ab"];

function randomText(random: () => number, maxPieces: number): string {
  let text = "";
  const count = Math.floor(random() * maxPieces);
  for (let i = 0; i < count; i++) text += PIECES[Math.floor(random() * PIECES.length)]!;
  return text;
}

function shuffled(random: () => number, n: number): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order;
}

describe("annotation sizes", () => {
  test("placeholderCount counts non-overlapping occurrences as replaceAll does", () => {
    expect(placeholderCount("{n}{n}x{n}", "{n}")).toBe(3);
    expect(placeholderCount("{{n}}", "{n}")).toBe(1);
    expect(placeholderCount("", "{n}")).toBe(0);
    expect(placeholderCount("{order}{order}", "{order}")).toBe(2);
  });

  test("predicted bytes equal the rendered annotations, for random templates and block counts", () => {
    const random = seededRandom(7);
    for (let round = 0; round < 400; round++) {
      const templates: AnnotationTemplates = {
        priority: randomText(random, 12),
        doc: randomText(random, 8),
        separator: randomText(random, 6),
        dedup: randomText(random, 10),
      };
      const blocks = round < 20 ? round : 1 + Math.floor(random() * 1200);
      const order = shuffled(random, blocks);
      expect(priorityAnnotationBytes(templates, blocks)).toBe(utf8Bytes(priorityAnnotation(templates, order)));
      const position = Math.floor(random() * 100_000);
      expect(docLabelBytes(templates, position)).toBe(utf8Bytes(docLabel(templates, position)));
      const label = randomText(random, 6);
      expect(dedupAnnotationBytes(templates, label)).toBe(utf8Bytes(dedupAnnotation(templates, label)));
    }
  });

  test("client text is inserted literally: $-patterns are not expanded", () => {
    const templates: AnnotationTemplates = { priority: "A {order} B", doc: "x$`{n}$'y", separator: "$&", dedup: "see {doc}" };
    expect(priorityAnnotation(templates, [1, 0])).toBe("A x$`2$'y$&x$`1$'y B");
    expect(dedupAnnotation(templates, "$`$'")).toBe("see $`$'");
  });

  test("the reviewer's amplification templates predict hundreds of megabytes", () => {
    const templates: AnnotationTemplates = { priority: "{order}".repeat(100), doc: "{n}".repeat(1365), separator: "s".repeat(4000), dedup: "{doc}" };
    // Each label is ~4 KB, joined by 4 KB separators, the whole list repeated 100 times.
    expect(priorityAnnotationBytes(templates, 1024)).toBeGreaterThan(800_000_000);
  });
});
