/**
 * The `documents` field of a chat request (the list vLLM's chat API takes for
 * RAG): rendered into prompt text that proxy/documents/textDocuments.ts recognises,
 * so it is reordered and deduplicated like documents written in a message.
 */
export interface FieldDocument {
  id?: string | number;
  title?: string;
  text: string;
}

/**
 * With a template, each document is the template with {id}, {title} and {text}
 * filled in (missing ones empty); by default an XML element whose attributes
 * are the id and title the document has.
 */
export function renderDocumentsField(documents: readonly FieldDocument[], template?: string): string {
  const rendered = documents.map((d) =>
    template === undefined
      ? `<document${attribute("id", d.id)}${attribute("title", d.title)}>\n${d.text}\n</document>`
      : fillTemplate(template, d),
  );
  return `<documents>\n${rendered.join("\n")}\n</documents>`;
}

/**
 * One pass with a function replacer: a document's text is inserted as it is (a string replacement
 * would expand "$&", "$`" and "$'" in it), and a title containing "{text}" is not filled in again.
 */
function fillTemplate(template: string, d: FieldDocument): string {
  return template.replace(/\{(id|title|text)\}/g, (_, name: string) => (name === "id" ? String(d.id ?? "") : name === "title" ? (d.title ?? "") : d.text));
}

function attribute(name: string, value: string | number | undefined): string {
  if (value === undefined) return "";
  const escaped = String(value).replaceAll("&", "&amp;").replaceAll('"', "&quot;").replaceAll("<", "&lt;");
  return ` ${name}="${escaped}"`;
}
