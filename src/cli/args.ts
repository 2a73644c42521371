/**
 * Command-line helpers shared by the commands: flag parsing (node:util parseArgs)
 * with usage errors, and validation of numeric flag values.
 */
import { parseArgs } from "node:util";

/** Exit codes: 0 success, 1 failure while working, 2 bad usage or bad input. */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** A bad command line: printed with a pointer to the command's --help, exit code 2. */
export class UsageError extends Error {
  constructor(
    message: string,
    /** The command whose help to point at, e.g. "index build". */
    readonly command = "",
  ) {
    super(message);
    this.name = "UsageError";
  }
}

/** A bad input file (unreadable, malformed): printed as is, exit code 2. */
export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InputError";
  }
}

export type FlagSpec = Record<string, { type: "string" | "boolean"; short?: string }>;

export interface ParsedFlags {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

/** parseArgs in strict mode; its errors become UsageErrors naming the command. */
export function parseFlags(args: string[], spec: FlagSpec, command: string, allowPositionals = false): ParsedFlags {
  let parsed;
  try {
    parsed = parseArgs({ args, options: spec, strict: true, allowPositionals });
  } catch (error) {
    const message = (error as Error).message;
    const unknown = /^Unknown option '([^']*)'/.exec(message);
    if (unknown) throw new UsageError(`unknown option ${unknown[1]}`, command);
    const missing = /^Option '([^ ']*)[^']*' argument missing/.exec(message);
    if (missing) throw new UsageError(`option ${missing[1]} needs a value`, command);
    const ambiguous = /^Option '([^ ']*)[^']*' argument is ambiguous/.exec(message);
    if (ambiguous) {
      throw new UsageError(
        `option ${ambiguous[1]} needs a value (write ${ambiguous[1]}=VALUE for a value starting with '-')`,
        command,
      );
    }
    const positional = /^Unexpected argument '([^']*)'/.exec(message);
    if (positional) throw new UsageError(`unexpected argument '${positional[1]}'`, command);
    throw new UsageError(message.split("\n")[0]!, command);
  }
  return { values: parsed.values as ParsedFlags["values"], positionals: parsed.positionals };
}

export function requiredString(flags: ParsedFlags, name: string, command: string): string {
  const value = flags.values[name];
  if (typeof value !== "string" || value === "") throw new UsageError(`missing --${name}`, command);
  return value;
}

function numberValue(raw: string, name: string, command: string, what: string): number {
  const trimmed = raw.trim();
  const value = trimmed === "" ? NaN : Number(trimmed);
  if (!Number.isFinite(value)) throw new UsageError(`--${name} must be ${what}, got '${raw}'`, command);
  return value;
}

/** A finite number >= min (and <= max), or the default when the flag is absent. */
export function numberFlag(
  flags: ParsedFlags,
  name: string,
  command: string,
  fallback: number,
  range: { min?: number; max?: number } = {},
): number {
  const raw = flags.values[name];
  if (typeof raw !== "string") return fallback;
  const what =
    range.max !== undefined
      ? `a number from ${range.min ?? "-inf"} to ${range.max}`
      : range.min === 0
        ? "a non-negative number"
        : "a number";
  const value = numberValue(raw, name, command, what);
  if ((range.min !== undefined && value < range.min) || (range.max !== undefined && value > range.max)) {
    throw new UsageError(`--${name} must be ${what}, got '${raw}'`, command);
  }
  return value;
}

/** An integer >= min, or undefined when the flag is absent. */
export function integerFlag(flags: ParsedFlags, name: string, command: string, min: number): number | undefined {
  const raw = flags.values[name];
  if (typeof raw !== "string") return undefined;
  const what = min === 0 ? "a non-negative integer" : min === 1 ? "a positive integer" : `an integer >= ${min}`;
  const value = numberValue(raw, name, command, what);
  if (!Number.isSafeInteger(value) || value < min) throw new UsageError(`--${name} must be ${what}, got '${raw}'`, command);
  return value;
}

const BYTE_UNITS: Record<string, number> = { "": 1, b: 1, k: 1024, kib: 1024, m: 1024 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gib: 1024 ** 3 };

/** A byte size: an integer with an optional binary unit (512, 64K, 256MiB, 1G, 1GiB); undefined when absent. */
export function byteSizeFlag(flags: ParsedFlags, name: string, command: string, min: number): number | undefined {
  const raw = flags.values[name];
  if (typeof raw !== "string") return undefined;
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(raw);
  const unit = match === null ? undefined : BYTE_UNITS[match[2]!.toLowerCase()];
  const value = match === null || unit === undefined ? NaN : Math.floor(Number(match[1]) * unit);
  if (!Number.isSafeInteger(value) || value < min) {
    throw new UsageError(`--${name} must be a byte size of at least ${min} (e.g. 1048576, 512KiB, 256MiB, 1GiB), got '${raw}'`, command);
  }
  return value;
}

export function choiceFlag<T extends string>(
  flags: ParsedFlags,
  name: string,
  command: string,
  choices: readonly T[],
  fallback: T,
): T {
  const raw = flags.values[name];
  if (typeof raw !== "string") return fallback;
  if (!(choices as readonly string[]).includes(raw)) {
    throw new UsageError(`--${name} must be one of ${choices.join(", ")}, got '${raw}'`, command);
  }
  return raw as T;
}

/**
 * The cache capacity from --capacity-tokens or --capacity-frac (a fraction of the
 * workload's total tokens, truncated as sim.py does); null (unlimited) when neither.
 */
export interface CapacityFlag {
  tokens?: number;
  fraction?: number;
}

export function capacityFlag(flags: ParsedFlags, command: string): CapacityFlag {
  const tokens = integerFlag(flags, "capacity-tokens", command, 0);
  const fraction =
    typeof flags.values["capacity-frac"] === "string"
      ? numberFlag(flags, "capacity-frac", command, 0, { min: 0, max: 1 })
      : undefined;
  if (tokens !== undefined && fraction !== undefined) {
    throw new UsageError("give --capacity-tokens or --capacity-frac, not both", command);
  }
  return { tokens, fraction };
}

/** The flags of a prefix-cache simulation (index build's hit ratios, simulate): block size and capacity. */
export const SIMULATION_FLAGS: FlagSpec = {
  "document-tokens": { type: "string" },
  "capacity-tokens": { type: "string" },
  "capacity-frac": { type: "string" },
};

export function simulationFlags(flags: ParsedFlags, command: string): { blockTokens: number; capacity: CapacityFlag } {
  return { blockTokens: integerFlag(flags, "document-tokens", command, 1) ?? 256, capacity: capacityFlag(flags, command) };
}

/** Old names of the simulation flags ("block" alone now means only a KV block). */
export const SIMULATION_ALIASES: Record<string, string> = { "block-tokens": "document-tokens" };

export function resolveCapacity(capacity: CapacityFlag, totalTokens: number): number | null {
  if (capacity.tokens !== undefined) return capacity.tokens;
  if (capacity.fraction !== undefined) return Math.trunc(capacity.fraction * totalTokens);
  return null;
}
