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
