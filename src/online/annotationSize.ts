/**
 * The size of rendered annotations, known before they are built: a request's
 * annotations are checked against the server's --max-annotation-bytes first,
 * so templates that repeat their placeholders cannot make an answer of
 * hundreds of megabytes out of a small request. Sizes are UTF-8 bytes and
 * equal exactly what annotations.ts renders (test/online/annotationSize.test.ts).
 */
import type { AnnotationTemplates } from "./annotations.ts";

/** How often `placeholder` occurs in `template` (non-overlapping, as replaceAll counts). */
export function placeholderCount(template: string, placeholder: string): number {
  let count = 0;
  for (let at = template.indexOf(placeholder); at >= 0; at = template.indexOf(placeholder, at + placeholder.length)) count++;
  return count;
}

export function utf8Bytes(text: string): number {
  return Buffer.byteLength(text, "utf8");
}

/** Σ over positions 1..n of the decimal digits of the position. */
function digitsUpTo(n: number): number {
  let total = 0;
  for (let width = 1, low = 1; low <= n; width++, low *= 10) total += width * (Math.min(n, low * 10 - 1) - low + 1);
  return total;
}

/** Template bytes with each placeholder removed, and the number of placeholders. */
function split(template: string, placeholder: string): { fixed: number; count: number } {
  const count = placeholderCount(template, placeholder);
  return { fixed: utf8Bytes(template) - count * placeholder.length, count };
}

interface TemplateSizes {
  priority: { fixed: number; count: number };
  doc: { fixed: number; count: number };
  separator: number;
}

// The default templates (and any object a client's request reuses) are measured once.
const measured = new WeakMap<AnnotationTemplates, TemplateSizes>();

function sizesOf(templates: AnnotationTemplates): TemplateSizes {
  let sizes = measured.get(templates);
  if (sizes === undefined) {
    sizes = { priority: split(templates.priority, "{order}"), doc: split(templates.doc, "{n}"), separator: utf8Bytes(templates.separator) };
    measured.set(templates, sizes);
  }
  return sizes;
}

/** Bytes of the labels "{n}" → 1..n joined by the separator: the text that replaces "{order}". */
export function orderBytes(templates: AnnotationTemplates, blocks: number): number {
  if (blocks <= 0) return 0;
  const { doc, separator } = sizesOf(templates);
  return blocks * doc.fixed + doc.count * digitsUpTo(blocks) + (blocks - 1) * separator;
}

/** Bytes of the priority annotation of a context of `blocks` blocks (priorityAnnotation's output). */
export function priorityAnnotationBytes(templates: AnnotationTemplates, blocks: number): number {
  const { priority } = sizesOf(templates);
  return priority.fixed + priority.count * orderBytes(templates, blocks);
}

/** Bytes of the dedup note that replaces a block first sent with label `earlierLabel`. */
export function dedupAnnotationBytes(templates: AnnotationTemplates, earlierLabel: string): number {
  return dedupNoteSizer(templates)(earlierLabel);
}

/** dedupAnnotationBytes with the template measured once, for many labels. */
export function dedupNoteSizer(templates: AnnotationTemplates): (earlierLabel: string) => number {
  const dedup = split(templates.dedup, "{doc}");
  return (earlierLabel) => dedup.fixed + dedup.count * utf8Bytes(earlierLabel);
}

/** Bytes of one label (docLabel's output) at 0-based position `position`. */
export function docLabelBytes(templates: AnnotationTemplates, position: number): number {
  const doc = split(templates.doc, "{n}");
  return doc.fixed + doc.count * String(position + 1).length;
}
