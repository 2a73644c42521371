import { describe, expect, test } from "bun:test";
import { scheduleBySearchPath } from "../../src/index/schedule.ts";

describe("scheduleBySearchPath (ContextPilot Algorithm 5)", () => {
  test("groups by the first path element, larger groups first, longer paths first inside a group", () => {
    const paths = [
      [0, 1], // 0: group 0
      [1], // 1: group 1
      [0, 0, 2], // 2: group 0, longest
      [2, 0], // 3: group 2
      [1, 0, 0], // 4: group 1, longer
      [0, 2], // 5: group 0
    ];
    const order = scheduleBySearchPath(paths, [0, 1, 2, 3, 4, 5]);
    expect(order).toEqual([2, 0, 5, 4, 1, 3]);
  });

  test("ties keep the given order (stable), so depth-first neighbours stay together", () => {
    const paths = [[3, 1], [3, 0], [3, 2]];
    expect(scheduleBySearchPath(paths, [1, 0, 2])).toEqual([1, 0, 2]);
    expect(scheduleBySearchPath(paths, [2, 1, 0])).toEqual([2, 1, 0]);
  });

  test("an empty path (a context alone under the root) forms its own group", () => {
    expect(scheduleBySearchPath([[], [0], [0, 1]], [0, 1, 2])).toEqual([2, 1, 0]);
  });
});
