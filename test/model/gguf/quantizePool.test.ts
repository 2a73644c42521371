import { describe, expect, test } from "bun:test";
import { NormalRandom } from "../../../src/model/normalRandom.ts";
import { QUANTIZABLE_TYPES, quantizeValues } from "../../../src/model/gguf/ggufQuantize.ts";
import { GGML_TYPE } from "../../../src/model/gguf/ggufTypes.ts";
import { QuantizePool } from "../../../src/model/gguf/quantizePool.ts";

describe("quantize pool", () => {
  test("the same bytes as quantizing inline, for every type it writes, values left as they were", async () => {
    const random = new NormalRandom(3, "pool");
    const values = new Float32Array(256 * 1000); // 1000 K-quant blocks: 3 uneven parts
    for (let i = 0; i < values.length; i++) values[i] = random.next();
    const copy = values.slice();
    const pool = new QuantizePool(3);
    try {
      expect(QUANTIZABLE_TYPES.length).toBe(10);
      for (const type of QUANTIZABLE_TYPES) {
        expect(Buffer.from(await pool.quantize(type, values)).equals(Buffer.from(quantizeValues(type, values)))).toBe(true);
      }
      expect(values).toEqual(copy);
      await expect(pool.quantize(GGML_TYPE.Q4_K, new Float32Array(300))).rejects.toThrow("Q4_K needs a multiple of 256 values, got 300");
    } finally {
      pool.close();
    }
  });

  test("a pool of one thread works inline; a bad thread count is refused", async () => {
    const pool = new QuantizePool(1);
    expect(await pool.quantize(GGML_TYPE.Q8_0, new Float32Array(32).fill(1))).toHaveLength(34);
    pool.close();
    expect(() => new QuantizePool(0)).toThrow("threads must be a positive integer, got 0");
  });
});
