/**
 * Short annotations that keep answer quality when context is reordered or
 * deduplicated (ContextPilot §5.3, §6). Templates can be set per request.
 */
export interface AnnotationTemplates {
  /** Priority annotation; "{order}" becomes the documents in relevance order. */
  priority: string;
  /** A document's label; "{n}" becomes its 1-based position in the text sent. */
  doc: string;
  /** Between labels in "{order}". */
  separator: string;
  /** Replaces a block sent earlier in the conversation; "{doc}" becomes its earlier label. */
  dedup: string;
}

export const DEFAULT_TEMPLATES: AnnotationTemplates = {
  priority: "Please read the context in the following priority order: {order} and answer the question.",
  doc: "[Doc {n}]",
  separator: " > ",
  dedup: "Please refer to {doc} in the previous conversation.",
};

export function withDefaults(templates: Partial<AnnotationTemplates> | undefined): AnnotationTemplates {
  return templates === undefined ? DEFAULT_TEMPLATES : { ...DEFAULT_TEMPLATES, ...templates };
}

export function docLabel(templates: AnnotationTemplates, position: number): string {
  // Digits: no "$" pattern to expand (see replaceLiterally).
  return templates.doc.replaceAll("{n}", String(position + 1));
}

/**
 * `order[i]` is the original position of the i-th returned block; the
 * annotation lists the returned documents' labels in original relevance order.
 */
export function priorityAnnotation(templates: AnnotationTemplates, order: readonly number[]): string {
  const returnedAt = new Array<number>(order.length);
  order.forEach((original, returned) => (returnedAt[original] = returned));
  const labels = returnedAt.map((returned) => docLabel(templates, returned));
  const joined = labels.join(templates.separator);
  return replaceLiterally(templates.priority, "{order}", joined);
}

export function dedupAnnotation(templates: AnnotationTemplates, earlierLabel: string): string {
  return replaceLiterally(templates.dedup, "{doc}", earlierLabel);
}

/**
 * Every `placeholder` replaced by `text` as it is: a string replacement expands "$&", "$`" and "$'"
 * (client-chosen templates could make it copy the whole template), so text with a "$" goes through a
 * function replacer, which is slower.
 */
function replaceLiterally(template: string, placeholder: string, text: string): string {
  return text.includes("$") ? template.replaceAll(placeholder, () => text) : template.replaceAll(placeholder, text);
}
