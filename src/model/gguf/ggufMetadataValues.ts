/**
 * Checked reads of GGUF metadata values by key, for the code that turns metadata into our
 * model config and tokenizer. Takes a map of plain values (strings, numbers, bigints,
 * booleans, JS arrays) or of the reader's typed values ({type, value}, arrays as
 * {itemType, items}), so the conversions do not depend on how the reader models a value.
 * Every error names the key.
 */

export type GgufMetadataLike = ReadonlyMap<string, unknown>;

export class GgufMetadataError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "GgufMetadataError";
  }
}

/** A typed value's plain value: {type, value} unwrapped, {itemType, items} to its items (nested arrays too). */
export function plainValue(value: unknown): unknown {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return value;
  const record = value as Record<string, unknown>;
  if (Array.isArray(record.items) && "itemType" in record) return (record.items as unknown[]).map(plainValue);
  if ("type" in record && "value" in record) return plainValue(record.value);
  return value;
}

function describe(value: unknown): string {
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return `the string ${JSON.stringify(value.length > 40 ? value.slice(0, 40) + "…" : value)}`;
  if (typeof value === "bigint") return `${value}`;
  return `${typeof value} ${String(value)}`;
}

function read(metadata: GgufMetadataLike, key: string): unknown {
  return plainValue(metadata.get(key));
}

export function optionalString(metadata: GgufMetadataLike, key: string): string | undefined {
  const value = read(metadata, key);
  if (value === undefined) return undefined;
  if (typeof value !== "string") throw new GgufMetadataError(`GGUF metadata key ${key} must be a string, got ${describe(value)}`);
  return value;
}

export function requiredString(metadata: GgufMetadataLike, key: string): string {
  const value = optionalString(metadata, key);
  if (value === undefined) throw new GgufMetadataError(`GGUF metadata key ${key} is missing`);
  return value;
}

function asInteger(value: unknown, key: string, min: number): number {
  const number = typeof value === "bigint" ? Number(value) : value;
  if (typeof number !== "number" || !Number.isSafeInteger(number) || number < min) {
    throw new GgufMetadataError(`GGUF metadata key ${key} must be an integer ≥ ${min}, got ${describe(value)}`);
  }
  return number;
}

/** An integer ≥ min (default 0), or undefined when the key is absent. */
export function optionalInteger(metadata: GgufMetadataLike, key: string, min = 0): number | undefined {
  const value = read(metadata, key);
  return value === undefined ? undefined : asInteger(value, key, min);
}

export function requiredInteger(metadata: GgufMetadataLike, key: string, min = 0): number {
  const value = optionalInteger(metadata, key, min);
  if (value === undefined) throw new GgufMetadataError(`GGUF metadata key ${key} is missing`);
  return value;
}

export function optionalNumber(metadata: GgufMetadataLike, key: string): number | undefined {
  const value = read(metadata, key);
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value)) throw new GgufMetadataError(`GGUF metadata key ${key} must be a finite number, got ${describe(value)}`);
  return value;
}

export function optionalBool(metadata: GgufMetadataLike, key: string): boolean | undefined {
  const value = read(metadata, key);
  if (value === undefined) return undefined;
  if (typeof value !== "boolean") throw new GgufMetadataError(`GGUF metadata key ${key} must be a bool, got ${describe(value)}`);
  return value;
}

function optionalArray(metadata: GgufMetadataLike, key: string): unknown[] | undefined {
  const value = read(metadata, key);
  if (value === undefined) return undefined;
  if (!Array.isArray(value)) throw new GgufMetadataError(`GGUF metadata key ${key} must be an array, got ${describe(value)}`);
  return value;
}

export function optionalStringArray(metadata: GgufMetadataLike, key: string): string[] | undefined {
  const items = optionalArray(metadata, key);
  if (items === undefined) return undefined;
  items.forEach((item, index) => {
    if (typeof item !== "string") throw new GgufMetadataError(`GGUF metadata key ${key}[${index}] must be a string, got ${describe(item)}`);
  });
  return items as string[];
}

export function requiredStringArray(metadata: GgufMetadataLike, key: string): string[] {
  const items = optionalStringArray(metadata, key);
  if (items === undefined) throw new GgufMetadataError(`GGUF metadata key ${key} is missing`);
  return items;
}

export function optionalNumberArray(metadata: GgufMetadataLike, key: string): number[] | undefined {
  const items = optionalArray(metadata, key);
  if (items === undefined) return undefined;
  return items.map((item, index) => {
    const number = typeof item === "bigint" ? Number(item) : item;
    if (typeof number !== "number" || !Number.isFinite(number)) throw new GgufMetadataError(`GGUF metadata key ${key}[${index}] must be a number, got ${describe(item)}`);
    return number;
  });
}
