/** A removal after the reader: a trim to reload after, or a deleted entry to read past. */
import { describe, expect, test } from "bun:test";
import { judgeGap } from "../../src/state/logGap.ts";

describe("judgeGap", () => {
  test("nothing removed past the reader, or already judged", () => {
    expect(judgeGap({ maxDeletedId: "0-0", firstId: "1-0", snapshotId: null }, "5-0", "0-0")).toBe("none");
    expect(judgeGap({ maxDeletedId: "4-0", firstId: "4-1", snapshotId: "4-0" }, "5-0", "0-0")).toBe("none");
    expect(judgeGap({ maxDeletedId: "9-0", firstId: "1-0", snapshotId: null }, "5-0", "9-0")).toBe("none");
  });

  test("an entry deleted after the reader while the log's front is still behind it: read on", () => {
    expect(judgeGap({ maxDeletedId: "9-0", firstId: "1-0", snapshotId: null }, "5-0", "0-0")).toBe("deleted");
    // The front is past the reader but no snapshot covers the gap: the entries were deleted, not trimmed.
    expect(judgeGap({ maxDeletedId: "9-0", firstId: "10-0", snapshotId: "3-0" }, "5-0", "0-0")).toBe("deleted");
    expect(judgeGap({ maxDeletedId: "9-0", firstId: null, snapshotId: null }, "5-0", "0-0")).toBe("deleted");
  });

  test("trimmed past the reader with a newer snapshot: reload", () => {
    expect(judgeGap({ maxDeletedId: "9-0", firstId: "10-0", snapshotId: "12-0" }, "5-0", "0-0")).toBe("trimmed");
    expect(judgeGap({ maxDeletedId: "9-0", firstId: null, snapshotId: "9-0" }, "5-0", "0-0")).toBe("trimmed");
  });
});
