/**
 * What a shared-log entry and a snapshot must look like before any of it is applied. Anyone who
 * can write to Redis can put anything in the log; an entry is checked whole (its fields, then
 * every change in it) so that one that fails is skipped entirely, never half-applied. Pure: no I/O.
 */
import { z } from "zod";
import type { ServiceSnapshot } from "../online/serviceChanges.ts";
import type { SharedChange } from "./sharedChange.ts";

const text = z.string();
const count = z.number().nonnegative();
const conversationEntries = z.array(z.tuple([text, text]));

/** A context as the index takes it: distinct block keys, one token count each. */
const insertRecord = z
  .object({ op: z.literal("insert"), id: text, keys: z.array(text), tokens: z.array(count), at: z.number() })
  .strict()
  .refine((record) => record.keys.length === record.tokens.length, "keys and tokens differ in length")
  .refine((record) => new Set(record.keys).size === record.keys.length, "a block key appears twice");

const changeRecord = z.union([
  insertRecord,
  z.object({ op: z.literal("remove"), ids: z.array(text) }).strict(),
  z.object({ op: z.literal("conversation"), conversation: text, entries: conversationEntries }).strict(),
  z.object({ op: z.literal("reset") }).strict(),
]);

const sharedChange = z.union([
  z.object({ c: z.literal("service"), r: changeRecord }).strict(),
  z.object({ c: z.literal("history"), conversation: text, messages: z.array(z.tuple([text, z.unknown()])) }).strict(),
]);

const changeBatch = z.array(sharedChange);

/** One decoded log entry: an instance's batches `first..n` (consecutive numbers), their changes in order. */
export interface LogEntry {
  id: string;
  origin: string;
  first: number;
  n: number;
  changes: SharedChange[];
}

/** An entry that could not be decoded: skipped by every reader, kept by id for the logs (a dead letter). */
export interface DeadLetter {
  id: string;
  reason: string;
}

export type DecodedEntry = { ok: true; entry: LogEntry } | { ok: false; dead: DeadLetter };

const batchNumber = /^[1-9]\d{0,15}$/;

/**
 * Decodes an entry's fields (o, f, n, d) whole: every change must pass before the entry is used.
 * An entry written by `headerOnlyFor` (the reading instance itself, which holds those changes
 * already) gets its fields checked but its changes left unparsed (`changes` is empty): parsing
 * and checking megabytes of JSON only to drop them would hold the request thread for nothing.
 */
export function decodeLogEntry(id: string, fields: readonly unknown[], headerOnlyFor?: string): DecodedEntry {
  const dead = (reason: string): DecodedEntry => ({ ok: false, dead: { id, reason } });
  if (!Array.isArray(fields)) return dead("its fields are not a list");
  const values = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const [name, value] = [fields[i], fields[i + 1]];
    if (typeof name === "string" && typeof value === "string") values.set(name, value);
  }
  const origin = values.get("o");
  const first = values.get("f");
  const n = values.get("n");
  const data = values.get("d");
  if (origin === undefined || origin === "" || first === undefined || n === undefined || data === undefined) {
    return dead(`it lacks the fields of a ctxr change batch (o, f, n, d); it has ${describeFieldNames(fields)}`);
  }
  if (!batchNumber.test(first) || !batchNumber.test(n) || Number(first) > Number(n)) return dead(`its batch numbers f=${clip(first)} n=${clip(n)} are not 1 <= f <= n`);
  if (origin === headerOnlyFor) return { ok: true, entry: { id, origin, first: Number(first), n: Number(n), changes: [] } };
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch (error) {
    return dead(`its changes are not JSON (${(error as Error).message})`);
  }
  const checked = changeBatch.safeParse(parsed);
  if (!checked.success) return dead(`its changes are not ctxr changes (${describeIssue(checked.error)})`);
  return { ok: true, entry: { id, origin, first: Number(first), n: Number(n), changes: checked.data as SharedChange[] } };
}

export interface SharedSnapshotState {
  version: 1;
  service: ServiceSnapshot;
  histories: [string, [string, unknown][]][];
}

const snapshotSchema = z.object({
  id: z.string().regex(/^\d+-\d+$/, "not a stream entry id"),
  state: z.object({
    version: z.literal(1),
    service: z.object({
      version: z.literal(1),
      contexts: z.array(
        z
          .tuple([text, z.array(text), z.array(count), z.number()])
          .refine(([, keys, tokens]) => keys.length === tokens.length && new Set(keys).size === keys.length, "a context's keys and tokens do not match"),
      ),
      conversations: z.array(z.tuple([text, conversationEntries])),
    }),
    histories: z.array(z.tuple([text, z.array(z.tuple([text, z.unknown()]))])),
  }),
});

export interface StoredSnapshot<S> {
  /** The last log entry the state covers ("0-0": none). */
  id: string;
  state: S;
}

/** A snapshot's text, checked whole; throws an Error saying what is wrong with it. */
export function decodeSnapshot(text: string): StoredSnapshot<SharedSnapshotState> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new Error(`it is not JSON (${(error as Error).message})`);
  }
  const checked = snapshotSchema.safeParse(parsed);
  if (!checked.success) throw new Error(`it is not a ctxr state snapshot (${describeIssue(checked.error)})`);
  return checked.data as StoredSnapshot<SharedSnapshotState>;
}

function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (issue === undefined) return "invalid";
  const path = issue.path.map(String).join(".");
  return `${path === "" ? "" : `${path}: `}${issue.message}`;
}

function describeFieldNames(fields: readonly unknown[]): string {
  const names = fields.filter((_, i) => i % 2 === 0).slice(0, 8).map((name) => JSON.stringify(clip(String(name))));
  return names.length === 0 ? "no fields" : `fields ${names.join(", ")}${fields.length > 16 ? ", ..." : ""}`;
}

function clip(value: string): string {
  return value.length > 40 ? `${value.slice(0, 40)}...` : value;
}
