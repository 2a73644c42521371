/**
 * The request file of `ctxr reuse calibrate`: JSONL, one request a line, as the server segments a
 * prompt whose chunks it reuses (completion `segments`: every document a chunk, the question
 * last, BOS first when the model adds one):
 *
 *   {"documents": ["text", ...], "question": "text", "warmup_order": [2, 0, 1]}
 *
 * `warmup_order` (optional) is the order the documents are first stored in, so that the measured
 * request reuses them at other positions after other neighbours; by default they are rotated by
 * one (the second document first). Blank lines are skipped; a bad line is an error naming it.
 */

export interface CalibrationRequest {
  /** 1-based line of the file. */
  line: number;
  documents: string[];
  question: string;
  /** A permutation of the documents' indices. */
  warmupOrder: number[];
}

export class CalibrationRequestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CalibrationRequestError";
  }
}

/** Most documents a request may have (the server's limit for a request's documents is larger; calibration stays small). */
export const MAX_CALIBRATION_DOCUMENTS = 256;

/** The default warm-up: the documents rotated by one, so no chunk but the head sits where it is measured. */
export function rotatedOrder(count: number): number[] {
  return Array.from({ length: count }, (_, i) => (i + 1) % count);
}

/** Parses a file's text; `name` is how errors name the file. */
export function parseCalibrationRequests(text: string, name: string): CalibrationRequest[] {
  const requests: CalibrationRequest[] = [];
  text.split("\n").forEach((raw, i) => {
    const line = i + 1;
    if (raw.trim() === "") return;
    const fail = (why: string): never => {
      throw new CalibrationRequestError(`${name} line ${line}: ${why}`);
    };
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch (error) {
      fail(`not valid JSON (${(error as Error).message})`);
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) fail(`expected an object like {"documents": ["..."], "question": "..."}`);
    const record = value as Record<string, unknown>;
    const unknown = Object.keys(record).find((key) => !["documents", "question", "warmup_order"].includes(key));
    if (unknown !== undefined) fail(`unknown field "${unknown}" (the fields are documents, question and warmup_order)`);
    const { documents, question } = record;
    if (!Array.isArray(documents) || documents.length === 0) fail(`"documents" must be a non-empty array of strings`);
    const docs = documents as unknown[];
    if (docs.length > MAX_CALIBRATION_DOCUMENTS) fail(`"documents" has ${docs.length} entries, at most ${MAX_CALIBRATION_DOCUMENTS}`);
    docs.forEach((doc, d) => {
      if (typeof doc !== "string" || doc === "") fail(`"documents"[${d}] must be a non-empty string`);
    });
    if (typeof question !== "string" || question === "") fail(`"question" must be a non-empty string`);
    let warmupOrder = rotatedOrder(docs.length);
    if (record.warmup_order !== undefined) {
      const order = record.warmup_order;
      const isPermutation =
        Array.isArray(order) && order.length === docs.length && order.every((d) => Number.isInteger(d) && d >= 0 && d < docs.length) && new Set(order).size === docs.length;
      if (!isPermutation) fail(`"warmup_order" must list each document index 0..${docs.length - 1} once`);
      warmupOrder = order as number[];
    }
    requests.push({ line, documents: docs as string[], question: question as string, warmupOrder });
  });
  if (requests.length === 0) throw new CalibrationRequestError(`${name} has no requests (one {"documents": [...], "question": "..."} per line)`);
  return requests;
}
