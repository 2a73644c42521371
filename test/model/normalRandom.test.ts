import { describe, expect, test } from "bun:test";
import { NormalRandom, Xoshiro128, hashLabel, portableLog } from "../../src/model/normalRandom.ts";

describe("portableLog", () => {
  test("within a few ulps of Math.log over (0, 1] and beyond", () => {
    const random = new Xoshiro128(11);
    const values = [1, 0.5, 2 ** -60, 1 - 2 ** -53, Math.SQRT1_2, Math.SQRT2, 3, 1e300, 5e-324];
    for (let i = 0; i < 100_000; i++) values.push((random.nextUint32() + 1) / 4294967297);
    for (const x of values) {
      const expected = Math.log(x);
      const tolerance = Math.max(Math.abs(expected) * 4 * Number.EPSILON, 4 * Number.EPSILON);
      if (Math.abs(portableLog(x) - expected) > tolerance) throw new Error(`log(${x}): ${portableLog(x)} vs ${expected}`);
    }
    expect(portableLog(1)).toBe(0);
    expect(() => portableLog(0)).toThrow(RangeError);
    expect(() => portableLog(-1)).toThrow(RangeError);
  });
});

describe("seeded streams", () => {
  test("the same seed and label give the same stream; others differ", () => {
    const take = (seed: number, label: string) => {
      const random = new NormalRandom(seed, label);
      return Array.from({ length: 16 }, () => random.next());
    };
    expect(take(1, "a")).toEqual(take(1, "a"));
    expect(take(1, "a")).not.toEqual(take(2, "a"));
    expect(take(1, "a")).not.toEqual(take(1, "b"));
    expect(take(2 ** 40, "a")).not.toEqual(take(0, "a"));
  });

  test("the first values are pinned (the checkpoint bytes depend on them)", () => {
    const uniform = new Xoshiro128(1, "model.embed_tokens.weight");
    expect(Array.from({ length: 4 }, () => uniform.nextUint32())).toEqual([3222388181, 3539457034, 2146043020, 4102621828]);
    const normal = new NormalRandom(1, "model.embed_tokens.weight");
    expect(Array.from({ length: 4 }, () => normal.next())).toEqual([
      0.5462920373002117, 0.7074339660502799, -0.00045142762397292, 0.6126518317956746,
    ]);
    expect(hashLabel("")).toBe(0x811c9dc5);
    expect(hashLabel("a")).toBe(0xe40c292c);
  });

  test("normal samples have mean 0, variance 1 and normal tails", () => {
    const random = new NormalRandom(5, "moments");
    const n = 200_000;
    let sum = 0;
    let squares = 0;
    let fourth = 0;
    let beyond2 = 0;
    for (let i = 0; i < n; i++) {
      const z = random.next();
      sum += z;
      squares += z * z;
      fourth += z ** 4;
      if (Math.abs(z) > 2) beyond2++;
    }
    expect(Math.abs(sum / n)).toBeLessThan(0.01);
    expect(Math.abs(squares / n - 1)).toBeLessThan(0.015);
    expect(Math.abs(fourth / n - 3)).toBeLessThan(0.1);
    expect(Math.abs(beyond2 / n - 0.0455)).toBeLessThan(0.003);
  });
});
