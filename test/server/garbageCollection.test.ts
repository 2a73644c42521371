import { describe, expect, test } from "bun:test";
import { CollectAfterBytes } from "../../src/server/garbageCollection.ts";

describe("CollectAfterBytes", () => {
  test("collects once per `everyBytes` of big bodies; small bodies never count", () => {
    let collections = 0;
    const collector = new CollectAfterBytes(10_000, 1_000, () => collections++);
    for (let i = 0; i < 1000; i++) collector.handled(999);
    expect(collections).toBe(0);
    for (let i = 0; i < 9; i++) collector.handled(1_000);
    expect(collections).toBe(0);
    collector.handled(1_000);
    expect(collections).toBe(1);
    collector.handled(25_000);
    expect(collections).toBe(2);
    collector.handled(9_999);
    expect(collections).toBe(2);
  });
});
