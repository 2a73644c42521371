/**
 * Parsing and validation of contexts in JSONL form (no I/O).
 *
 * One context a line, either a JSON array of block ids or an object with a
 * "blocks" array (and optionally an "id"). A block is an id, an integer or a string
 * (1 and "1" are different blocks), or an object as the online API takes it,
 * {"id"?, "text"?, "tokens"?}: with an id it is that id; a text without an id is the
 * block `text:<hash of its whitespace-normalized text>` (blockText.ts). Blank lines are
 * skipped, but line numbers in errors are the real line numbers of the text (1-based).
 */
import { hashBlockText, textBlockLabel } from "./blockText.ts";
import type { BlockId, ContextSet } from "./contextSet.ts";
import { ContextSetBuilder } from "./contextSet.ts";

/** A context's id as the user gave it, or its 0-based position among the contexts. */
export type ContextId = string | number;

export interface ParsedContexts {
  readonly set: ContextSet;
  /** ids[i]: the "id" of context i, else its 0-based line number. */
  readonly ids: ContextId[];
  /** lines[i]: the 1-based line number context i came from. */
  readonly lines: Int32Array;
  /** Dense block number -> the block object it was first written as (undefined: first written as an id; a sparse array). */
  readonly blockObjects: (BlockObject | undefined)[];
}

/** A block written as an object, as the online API takes it. */
export interface BlockObject {
  id?: BlockId;
  text?: string;
  tokens?: number;
}

export interface ParseContextsOptions {
  /** Name used in error messages (a file name); default "input". */
  source?: string;
  /** Accept contexts without blocks (default false; the simulator accepts them). */
  allowEmpty?: boolean;
  /** Accept a block repeated inside one context (default false). */
  allowRepeats?: boolean;
}

/** A problem with one line of the input (line 0: the input as a whole). */
export class ContextsJsonlError extends Error {
  constructor(
    readonly source: string,
    readonly line: number,
    readonly problem: string,
  ) {
    super(line > 0 ? `${source}:${line}: ${problem}` : `${source}: ${problem}`);
    this.name = "ContextsJsonlError";
  }
}

export function parseContextsJsonl(text: string, options: ParseContextsOptions = {}): ParsedContexts {
  const source = options.source ?? "input";
  const builder = new ContextSetBuilder();
  const ids: ContextId[] = [];
  const lines: number[] = [];
  const blockObjects: (BlockObject | undefined)[] = [];
  let seen = new Int32Array(1024); // dense block -> 1 + index of the last context holding it

  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  let lineNumber = 0;
  let start = 0;
  while (start <= text.length) {
    let end = text.indexOf("\n", start);
    if (end === -1) end = text.length;
    lineNumber++;
    const line = text.slice(start, end).trim();
    start = end + 1;
    if (line === "") continue;

    const fail = (problem: string): never => {
      throw new ContextsJsonlError(source, lineNumber, problem);
    };
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      fail(`malformed JSON (${(error as Error).message})`);
    }

    let blocks: unknown;
    let id: ContextId = lineNumber - 1; // the 0-based line number, as the issue specifies
    if (Array.isArray(value)) {
      blocks = value;
    } else if (value !== null && typeof value === "object") {
      const record = value as Record<string, unknown>;
      blocks = record.blocks;
      if (!Array.isArray(blocks)) {
        fail(
          blocks === undefined
            ? `object has no "blocks" array`
            : `"blocks" must be an array of block ids, got ${describe(blocks)}`,
        );
      }
      if ("id" in record) {
        const given = record.id;
        if (typeof given === "string" || (typeof given === "number" && Number.isFinite(given))) id = given;
        else fail(`"id" must be a string or a number, got ${describe(given)}`);
      }
    } else {
      fail(`expected a JSON array of block ids or an object with a "blocks" array, got ${describe(value)}`);
    }

    const list = blocks as unknown[];
    if (list.length === 0 && !options.allowEmpty) fail("empty context (no blocks)");
    let objects: Map<number, BlockObject> | null = null;
    for (let k = 0; k < list.length; k++) {
      const block = list[k];
      if (typeof block === "string") continue;
      if (typeof block === "number" && Number.isInteger(block)) {
        checkIntegerId(block, k, fail);
        continue;
      }
      if (block !== null && typeof block === "object" && !Array.isArray(block)) {
        objects ??= new Map();
        objects.set(k, checkBlockObject(block as Record<string, unknown>, k, fail));
        list[k] = blockIdOf(objects.get(k)!);
        continue;
      }
      fail(`position ${k + 1}: ${describe(block)} is not a block id (an integer or a string)`);
    }

    const knownBlocks = builder.blockCount;
    builder.add(list as BlockId[]);
    if (objects !== null) {
      // New blocks get the next dense numbers: record the objects among them as first written.
      const dense = builder.lastContext();
      for (const [k, object] of objects) if (dense[k]! >= knownBlocks) blockObjects[dense[k]!] ??= object;
    }
    const contextNumber = ids.length;
    ids.push(id);
    lines.push(lineNumber);

    if (!options.allowRepeats) {
      const dense = builder.lastContext();
      for (let k = 0; k < dense.length; k++) {
        const b = dense[k]!;
        if (b >= seen.length) {
          let size = seen.length * 2;
          while (size <= b) size *= 2;
          const grown = new Int32Array(size);
          grown.set(seen);
          seen = grown;
        }
        if (seen[b] === contextNumber + 1) fail(`block ${JSON.stringify(list[k])} appears twice in one context`);
        seen[b] = contextNumber + 1;
      }
    }
  }

  if (ids.length === 0) throw new ContextsJsonlError(source, 0, "no contexts (the input is empty or only blank lines)");
  return { set: builder.build(), ids, lines: Int32Array.from(lines), blockObjects };
}

const BLOCK_OBJECT_FIELDS = new Set(["id", "text", "tokens"]);

function checkIntegerId(id: number, position: number, fail: (problem: string) => never): void {
  if (!Number.isSafeInteger(id)) fail(`position ${position + 1}: block id ${id} is too large to be exact (beyond 2^53); write it as a string`);
}

/** A block object's fields checked as the online API checks them. */
function checkBlockObject(block: Record<string, unknown>, position: number, fail: (problem: string) => never): BlockObject {
  const at = `position ${position + 1}`;
  const unknown = Object.keys(block).find((key) => !BLOCK_OBJECT_FIELDS.has(key));
  if (block.id === undefined && block.text === undefined) {
    fail(`${at}: an object is not a block id unless it has an "id" or a "text"${unknown === undefined ? "" : ` (it has ${JSON.stringify(unknown)})`}`);
  }
  if (unknown !== undefined) fail(`${at}: unknown block field ${JSON.stringify(unknown)} (a block object has "id", "text" and "tokens")`);
  const { id, text, tokens } = block;
  if (id !== undefined) {
    if (typeof id === "number" && Number.isInteger(id)) checkIntegerId(id, position, fail);
    else if (typeof id !== "string") fail(`${at}: "id" must be an integer or a string, got ${describe(id)}`);
  }
  if (text !== undefined && typeof text !== "string") fail(`${at}: "text" must be a string, got ${describe(text)}`);
  if (tokens !== undefined && !(typeof tokens === "number" && Number.isSafeInteger(tokens) && tokens > 0)) {
    fail(`${at}: "tokens" must be a positive integer, got ${describe(tokens)}`);
  }
  return block as BlockObject;
}

/** The id a block object stands for: its id, else its text's label. */
function blockIdOf(block: BlockObject): BlockId {
  return block.id ?? textBlockLabel(hashBlockText(block.text!));
}

/** One JSONL line of a context: {"id", "blocks"} plus extra fields, block ids as the user's. */
export function formatContextLine(id: ContextId, blocks: readonly BlockId[], extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ id, blocks, ...extra });
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  switch (typeof value) {
    case "object":
      return "an object";
    case "boolean":
      return String(value);
    case "number":
      return String(value);
    case "string":
      return JSON.stringify(value);
    default:
      return typeof value;
  }
}
