/**
 * GGUF metadata values: the value types of the format (ids as stored in a file), a typed
 * value model that round-trips exactly (64-bit integers as bigint, arrays keep their
 * item type, arrays may nest), builders for writers, and checked accessors for readers.
 *
 *   const metadata: GgufMetadata = new Map([["general.architecture", ggufString("llama")]]);
 *   metadataString(metadata, "general.architecture")  // "llama", or a GgufError naming the key
 */

export const GGUF_VALUE_TYPE = {
  uint8: 0,
  int8: 1,
  uint16: 2,
  int16: 3,
  uint32: 4,
  int32: 5,
  float32: 6,
  bool: 7,
  string: 8,
  array: 9,
  uint64: 10,
  int64: 11,
  float64: 12,
} as const;

export type GgufValueType = keyof typeof GGUF_VALUE_TYPE;
export type GgufNumberType = "uint8" | "int8" | "uint16" | "int16" | "uint32" | "int32" | "float32" | "float64";
export type GgufBigIntType = "uint64" | "int64";

export const GGUF_VALUE_TYPE_NAMES: readonly (GgufValueType | undefined)[] = (() => {
  const names: (GgufValueType | undefined)[] = [];
  for (const [name, id] of Object.entries(GGUF_VALUE_TYPE)) names[id] = name as GgufValueType;
  return names;
})();

/** An array: its item type and items (numbers, bigints, booleans, strings or nested arrays). */
export interface GgufArray {
  itemType: GgufValueType;
  items: readonly GgufArrayItem[];
}
export type GgufArrayItem = number | bigint | boolean | string | GgufArray;

export type GgufValue =
  | { type: GgufNumberType; value: number }
  | { type: GgufBigIntType; value: bigint }
  | { type: "bool"; value: boolean }
  | { type: "string"; value: string }
  | { type: "array"; value: GgufArray };

/** Metadata in file order. */
export type GgufMetadata = Map<string, GgufValue>;

export class GgufError extends Error {
  constructor(message: string) {
    super(`gguf: ${message}`);
    this.name = "GgufError";
  }
}

export const ggufString = (value: string): GgufValue => ({ type: "string", value });
export const ggufUint32 = (value: number): GgufValue => ({ type: "uint32", value });
export const ggufFloat32 = (value: number): GgufValue => ({ type: "float32", value });
export const ggufBool = (value: boolean): GgufValue => ({ type: "bool", value });
export const ggufArray = (itemType: GgufValueType, items: readonly GgufArrayItem[]): GgufValue => ({ type: "array", value: { itemType, items } });

/** Byte ranges and bit ranges of the numeric types, for the writer's checks. */
const INTEGER_RANGE: Partial<Record<GgufValueType, [number | bigint, number | bigint]>> = {
  uint8: [0, 255],
  int8: [-128, 127],
  uint16: [0, 65535],
  int16: [-32768, 32767],
  uint32: [0, 4294967295],
  int32: [-2147483648, 2147483647],
  uint64: [0n, 2n ** 64n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
};

/** Throws naming `where` when an item does not fit its declared type. */
export function checkGgufItem(type: GgufValueType, item: unknown, where: string): void {
  const range = INTEGER_RANGE[type];
  if (type === "uint64" || type === "int64") {
    if (typeof item !== "bigint" || item < range![0]! || item > range![1]!) throw new GgufError(`${where}: ${String(item)} is not a ${type} (a bigint in range)`);
  } else if (range) {
    if (typeof item !== "number" || !Number.isInteger(item) || item < (range[0] as number) || item > (range[1] as number)) {
      throw new GgufError(`${where}: ${String(item)} is not a ${type}`);
    }
  } else if (type === "float32" || type === "float64") {
    if (typeof item !== "number") throw new GgufError(`${where}: ${String(item)} is not a number`);
  } else if (type === "bool") {
    if (typeof item !== "boolean") throw new GgufError(`${where}: ${String(item)} is not a boolean`);
  } else if (type === "string") {
    if (typeof item !== "string") throw new GgufError(`${where}: ${String(item)} is not a string`);
  } else if (type === "array") {
    const array = item as GgufArray;
    if (typeof array !== "object" || array === null || !Array.isArray(array.items) || !(array.itemType in GGUF_VALUE_TYPE)) {
      throw new GgufError(`${where}: not an array value`);
    }
    array.items.forEach((element, index) => checkGgufItem(array.itemType, element, `${where}[${index}]`));
  } else {
    throw new GgufError(`${where}: unknown value type ${String(type)}`);
  }
}

function required(metadata: GgufMetadata, key: string): GgufValue {
  const value = metadata.get(key);
  if (value === undefined) throw new GgufError(`metadata key ${key} is missing`);
  return value;
}

export function metadataString(metadata: GgufMetadata, key: string): string {
  const value = required(metadata, key);
  if (value.type !== "string") throw new GgufError(`metadata key ${key} is a ${value.type}, a string expected`);
  return value.value;
}

/** Any numeric type as a JS number (64-bit integers must be safe integers). */
export function metadataNumber(metadata: GgufMetadata, key: string): number {
  const value = required(metadata, key);
  if (value.type === "uint64" || value.type === "int64") {
    const number = Number(value.value);
    if (!Number.isSafeInteger(number)) throw new GgufError(`metadata key ${key}: ${value.value} is too large`);
    return number;
  }
  if (value.type === "bool" || value.type === "string" || value.type === "array") throw new GgufError(`metadata key ${key} is a ${value.type}, a number expected`);
  return value.value as number;
}

export function metadataBool(metadata: GgufMetadata, key: string): boolean {
  const value = required(metadata, key);
  if (value.type !== "bool") throw new GgufError(`metadata key ${key} is a ${value.type}, a bool expected`);
  return value.value;
}

export function metadataArray(metadata: GgufMetadata, key: string): GgufArray {
  const value = required(metadata, key);
  if (value.type !== "array") throw new GgufError(`metadata key ${key} is a ${value.type}, an array expected`);
  return value.value;
}
