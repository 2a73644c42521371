/** Small seeded-random helpers shared by the fuzz tests. */
export type Random = () => number;

export const pick = <T>(random: Random, items: readonly T[]): T => items[Math.floor(random() * items.length)]!;

export const integer = (random: Random, max: number): number => Math.floor(random() * max);

/** Up to `max` characters drawn from `alphabet`. */
export function randomString(random: Random, alphabet: string, max = 12): string {
  let out = "";
  for (let i = integer(random, max); i > 0; i--) out += alphabet[integer(random, alphabet.length)];
  return out;
}

export type JsonPath = (string | number)[];

/** Every path into a JSON value, the root's ([]) first, depth first. */
export function jsonPaths(value: unknown): JsonPath[] {
  const paths: JsonPath[] = [];
  const walk = (node: unknown, path: JsonPath) => {
    paths.push(path);
    if (Array.isArray(node)) node.forEach((v, i) => walk(v, [...path, i]));
    else if (node !== null && typeof node === "object") for (const [k, v] of Object.entries(node)) walk(v, [...path, k]);
  };
  walk(value, []);
  return paths;
}
