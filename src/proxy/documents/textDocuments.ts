/**
 * Documents already inside a message's text, in the two forms RAG prompts use:
 *
 *  - XML-tagged: a run of `<document …>…</document>` elements (optionally
 *    wrapped in `<documents>`), separated only by whitespace;
 *  - numbered: consecutive paragraphs starting with `[1] `, `[2] `, … — each runs
 *    to the next marker, the last one to the first blank line.
 *
 * `findTextDocuments` returns the region and its documents; `renderTextDocuments`
 * writes them back in a new order (numbered documents are renumbered by their
 * new position, so equal prefixes render to equal bytes), with any document
 * replaced by a note (dedup) and an annotation after the region. Text outside
 * the region is untouched; text in any other form is not recognised.
 */
export type TextDocumentFormat = "xml" | "numbered";

export interface TextDocument {
  /** The document as it appears: the whole element, or the paragraph without its "[n] " marker. */
  readonly raw: string;
  /** The document's content: what identifies it (whitespace-normalized later). */
  readonly content: string;
}

export interface TextDocuments {
  readonly format: TextDocumentFormat;
  /** Text before the documents region (including any `<documents>` opening tag). */
  readonly before: string;
  readonly documents: TextDocument[];
  /** What separated the documents in the original. */
  readonly separator: string;
  /** Text after the region (including any `</documents>` closing tag). */
  readonly after: string;
}

const XML_DOCUMENT = /<document(?:\s[^>]*)?>([\s\S]*?)<\/document\s*>/g;
const NUMBER_MARKER = /^\[(\d+)\] ?/gm;

export function findTextDocuments(text: string): TextDocuments | null {
  return findXmlDocuments(text) ?? findNumberedDocuments(text);
}

function findXmlDocuments(text: string): TextDocuments | null {
  const matches = [...text.matchAll(XML_DOCUMENT)];
  if (matches.length === 0) return null;
  // The first run of elements separated only by whitespace.
  const run = [matches[0]!];
  for (let i = 1; i < matches.length; i++) {
    const previous = run[run.length - 1]!;
    const gap = text.slice(previous.index! + previous[0].length, matches[i]!.index!);
    if (gap.trim() !== "") break;
    run.push(matches[i]!);
  }
  const first = run[0]!;
  const last = run[run.length - 1]!;
  const separator = run.length > 1 ? text.slice(first.index! + first[0].length, run[1]!.index!) : "\n";
  return {
    format: "xml",
    before: text.slice(0, first.index!),
    documents: run.map((m) => ({ raw: m[0], content: m[1]! })),
    separator,
    after: text.slice(last.index! + last[0].length),
  };
}

function findNumberedDocuments(text: string): TextDocuments | null {
  const markers = [...text.matchAll(NUMBER_MARKER)];
  // A list starts at "[1]" and continues with "[2]", "[3]", … in order.
  const start = markers.findIndex((m) => m[1] === "1");
  if (start < 0) return null;
  const run = [markers[start]!];
  for (let i = start + 1; i < markers.length && markers[i]![1] === String(run.length + 1); i++) run.push(markers[i]!);
  if (run.length < 2) return null;
  const documents: TextDocument[] = [];
  let end = 0;
  for (let i = 0; i < run.length; i++) {
    const bodyStart = run[i]!.index! + run[i]![0].length;
    let bodyEnd: number;
    if (i + 1 < run.length) bodyEnd = run[i + 1]!.index!;
    else {
      const blank = text.indexOf("\n\n", bodyStart);
      bodyEnd = blank < 0 ? text.length : blank;
    }
    // A document's own trailing newline belongs to the separator.
    let contentEnd = bodyEnd;
    while (contentEnd > bodyStart && text[contentEnd - 1] === "\n") contentEnd--;
    const content = text.slice(bodyStart, contentEnd);
    documents.push({ raw: content, content });
    end = contentEnd;
  }
  const separator = text.slice(run[0]!.index! + run[0]![0].length + documents[0]!.raw.length, run[1]!.index!);
  return { format: "numbered", before: text.slice(0, run[0]!.index!), documents, separator: separator || "\n", after: text.slice(end) };
}

/**
 * Writes the documents back: `order[i]` is the original index of the i-th
 * document to write; `notes` maps an original index to the text that replaces
 * it (a dedup note); `annotation` (if any) follows the region on its own line.
 */
export function renderTextDocuments(found: TextDocuments, order: readonly number[], notes: ReadonlyMap<number, string>, annotation: string | null): string {
  const parts = order.map((original, position) => {
    const body = notes.get(original) ?? found.documents[original]!.raw;
    return found.format === "numbered" ? `[${position + 1}] ${body}` : body;
  });
  const region = found.before + parts.join(found.separator);
  if (annotation === null) return region + found.after;
  // The annotation goes after the region, and after a closing </documents> wrapper if there is one.
  const wrapper = /^\s*<\/documents\s*>/.exec(found.after);
  const cut = wrapper === null ? 0 : wrapper[0].length;
  const rest = found.after.slice(cut);
  return region + found.after.slice(0, cut) + "\n" + annotation + (rest === "" || rest.startsWith("\n") ? "" : "\n") + rest;
}
