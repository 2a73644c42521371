/** Random KV data and helpers shared by the test/kv tests. */
import { expect } from "bun:test";
import type { KvData } from "../../src/runner/runnerProtocol.ts";

/** A small deterministic generator (mulberry32). */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/** count tokens of random K/V (with -0, subnormals, extremes and infinities mixed in) over `layers` layers. */
export function randomKv(layers: number, kvWidth: number, count: number, seed = 1): KvData {
  const random = seededRandom(seed);
  const specials = [-0, 0, 1e-45, -1e-45, 3.4028234663852886e38, -Infinity, Infinity, 1.1754943508222875e-38];
  const fill = (values: Float32Array): Float32Array => {
    for (let i = 0; i < values.length; i++) {
      values[i] = random() < 0.05 ? specials[Math.floor(random() * specials.length)]! : (random() - 0.5) * 10 ** Math.floor(random() * 8 - 4);
    }
    return values;
  };
  const positions = new Int32Array(count);
  for (let i = 0; i < count; i++) positions[i] = i === 0 ? -2147483648 : Math.floor(random() * 2 ** 31) - 2 ** 30;
  return {
    positions,
    layers: Array.from({ length: layers }, () => ({ k: fill(new Float32Array(count * kvWidth)), v: fill(new Float32Array(count * kvWidth)) })),
  };
}

function bits(values: Float32Array | Int32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

/** Bit-exact equality of two KvData (-0 and NaN payloads included). */
export function expectSameKv(got: KvData, want: KvData): void {
  expect(bits(got.positions)).toEqual(bits(want.positions));
  expect(got.layers.length).toBe(want.layers.length);
  got.layers.forEach((layer, i) => {
    expect(bits(layer.k)).toEqual(bits(want.layers[i]!.k));
    expect(bits(layer.v)).toEqual(bits(want.layers[i]!.v));
  });
}
