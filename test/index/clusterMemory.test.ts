import { describe, expect, test } from "bun:test";
import { CLUSTER_MEMORY_LIMIT_BYTES, ClusterTooLargeError, checkClusterFits, clusterContextLimit, clusterMemoryBytes } from "../../src/index/clusterMemory.ts";
import { buildContextIndex } from "../../src/index/buildIndex.ts";
import { contextSetFromArrays } from "../../src/index/contextSet.ts";

describe("clusterMemoryBytes", () => {
  test("the distance matrix dominates: 200k contexts need what the WASM kernel asked for (152,588 MiB)", () => {
    const distanceMiB = (200_000 * 199_999 * 4) / 2 ** 20;
    expect(Math.ceil(distanceMiB)).toBe(152_588);
    expect(clusterMemoryBytes(200_000, 200_000 * 15)).toBeGreaterThan(152_588 * 2 ** 20 - 2 ** 20);
  });

  test("the context limit is the largest count that fits", () => {
    const limit = clusterContextLimit(15);
    expect(limit).toBeGreaterThan(30_000);
    expect(limit).toBeLessThan(33_000);
    expect(clusterMemoryBytes(limit, limit * 15)).toBeLessThanOrEqual(CLUSTER_MEMORY_LIMIT_BYTES);
    expect(clusterMemoryBytes(limit + 1, (limit + 1) * 15)).toBeGreaterThan(CLUSTER_MEMORY_LIMIT_BYTES);
  });
});

describe("checkClusterFits", () => {
  const contexts = Array.from({ length: 50 }, (_, i) => [i, i + 1, 1000]);
  const set = contextSetFromArrays(contexts);

  test("passes a set that fits, refuses one that does not, naming the trie", () => {
    expect(() => checkClusterFits(set)).not.toThrow();
    const tight = clusterMemoryBytes(set.size, set.flat.length) - 1;
    let error: unknown;
    try {
      checkClusterFits(set, tight);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ClusterTooLargeError);
    expect((error as ClusterTooLargeError).contexts).toBe(50);
    expect((error as ClusterTooLargeError).maxContexts).toBe(49);
    expect((error as Error).message).toContain("the cluster method cannot hold 50 contexts");
    expect((error as Error).message).toContain("--method trie");
  });

  test("buildContextIndex refuses before clustering; auto and trie are not limited by it", () => {
    const big = contextSetFromArrays(Array.from({ length: 40_000 }, (_, i) => [i % 500, 10_000 + i]));
    const started = performance.now();
    expect(() => buildContextIndex(big, { method: "cluster" })).toThrow(ClusterTooLargeError);
    expect(performance.now() - started).toBeLessThan(1000); // refused up front, no distances computed
    expect(buildContextIndex(big, { method: "auto" }).method).toBe("trie");
  });
});
