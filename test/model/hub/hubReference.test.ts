import { describe, expect, test } from "bun:test";
import { formatHubReference, isHubReference, parseHubReference } from "../../../src/model/hub/hubReference.ts";

describe("parseHubReference", () => {
  test("ORG/REPO, with a quantization or a file path", () => {
    expect(parseHubReference("hf:bartowski/Llama-3.2-1B-Instruct-GGUF")).toEqual({ repo: "bartowski/Llama-3.2-1B-Instruct-GGUF", selector: null, revision: "main" });
    expect(parseHubReference("hf:org/repo:Q8_0").selector).toBe("Q8_0");
    expect(parseHubReference("hf:org/repo:sub/model-Q4_K_M.gguf").selector).toBe("sub/model-Q4_K_M.gguf");
    expect(formatHubReference(parseHubReference("hf:org/repo:q4_k_m"))).toBe("hf:org/repo:q4_k_m");
    expect(isHubReference("hf:org/repo")).toBe(true);
    expect(isHubReference("./models/org/repo")).toBe(false);
  });

  test("@REV names a branch, tag or commit; the default is main", () => {
    expect(parseHubReference("hf:org/repo@v1.0")).toEqual({ repo: "org/repo", selector: null, revision: "v1.0" });
    expect(parseHubReference("hf:org/repo:Q8_0@refs/pr/3")).toEqual({ repo: "org/repo", selector: "Q8_0", revision: "refs/pr/3" });
    const sha = "0123456789abcdef0123456789abcdef01234567";
    expect(parseHubReference(`hf:org/repo:sub/model.gguf@${sha}`)).toEqual({ repo: "org/repo", selector: "sub/model.gguf", revision: sha });
    expect(formatHubReference(parseHubReference("hf:org/repo:Q8_0@dev"))).toBe("hf:org/repo:Q8_0@dev");
    expect(formatHubReference(parseHubReference("hf:org/repo@main"))).toBe("hf:org/repo");
    for (const [text, problem] of [
      ["hf:org/repo@", /nothing after '@'/],
      ["hf:org/repo@../x", /'..\/x' is not a branch, tag or commit name/],
      ["hf:org/repo@a..b", /not a branch, tag or commit name/],
      ["hf:org/repo@/abs", /not a branch, tag or commit name/],
      ["hf:org/repo@dev/", /not a branch, tag or commit name/],
      ["hf:org/repo@x.lock", /not a branch, tag or commit name/],
      ["hf:org/repo@a/.hidden", /not a branch, tag or commit name/],
      ["hf:org/repo@two@signs", /not a branch, tag or commit name/],
      ["hf:org/repo@a b", /not a branch, tag or commit name/],
    ] as const) {
      expect(() => parseHubReference(text)).toThrow(problem);
    }
  });

  test("a bad name is refused, saying how to write one", () => {
    for (const [text, problem] of [
      ["hf:repo-only", /'repo-only' is not a repository name/],
      ["hf:a/b/c", /'a\/b\/c' is not a repository name/],
      ["hf:org/re po", /not a repository name/],
      ["hf:org--x/repo", /not a repository name/],
      ["hf:org/..", /not a repository name/],
      ["hf:org/repo:", /nothing after ':'/],
      ["hf:org/repo:../secret.gguf", /not a file path inside the repository/],
      ["hf:org/repo:/abs.gguf", /not a file path inside the repository/],
      ["org/repo", /not a model on the hub/],
    ] as const) {
      expect(() => parseHubReference(text)).toThrow(problem);
    }
    expect(() => parseHubReference("hf:x")).toThrow(/hf:ORG\/REPO:QUANT/);
  });
});
