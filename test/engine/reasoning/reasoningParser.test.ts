import { describe, expect, test } from "bun:test";
import { detectReasoningParser, reasoningStartOf, resolveReasoningParser } from "../../../src/engine/reasoning/reasoningParser.ts";

// The generation prompts' ends as the models' own templates write them.
const QWEN3_THINKING = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
const QWEN3_NOT_THINKING = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
const DEEPSEEK_R1 = "<｜User｜>Hi<｜Assistant｜><think>\n";
const DEEPSEEK_R1_OLD = "<｜User｜>Hi<｜Assistant｜>";

describe("reasoningStartOf", () => {
  test("a prompt that closed the think block: content, whatever the parser", () => {
    expect(reasoningStartOf("qwen3", QWEN3_NOT_THINKING, false)).toBe("content");
    expect(reasoningStartOf("deepseek_r1", QWEN3_NOT_THINKING, false)).toBe("content");
  });

  test("a prompt that opened it: reasoning, whatever the parser", () => {
    expect(reasoningStartOf("qwen3", DEEPSEEK_R1, false)).toBe("reasoning");
    expect(reasoningStartOf("deepseek_r1", DEEPSEEK_R1, false)).toBe("reasoning");
  });

  test("neither: deepseek_r1 starts inside the reasoning, qwen3 waits for <think>", () => {
    expect(reasoningStartOf("deepseek_r1", DEEPSEEK_R1_OLD, false)).toBe("reasoning");
    expect(reasoningStartOf("qwen3", QWEN3_THINKING, false)).toBe("opening");
  });

  test("enable_thinking false: content", () => {
    expect(reasoningStartOf("qwen3", QWEN3_THINKING, true)).toBe("content");
    expect(reasoningStartOf("deepseek_r1", DEEPSEEK_R1, true)).toBe("content");
  });
});

describe("detectReasoningParser", () => {
  test("from the template's markers", () => {
    expect(detectReasoningParser("{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}")).toBe("qwen3");
    expect(detectReasoningParser("{% set content = content.split('</think>')[-1] %}<｜Assistant｜><think>\n")).toBe("deepseek_r1");
    expect(detectReasoningParser("<|assistant|><think>\n")).toBe("deepseek_r1");
    expect(detectReasoningParser("[INST] {{ message.content }} [/INST]")).toBeNull();
    expect(detectReasoningParser(null)).toBeNull();
  });

  test("auto detects, none turns it off, a name is taken as given", () => {
    expect(resolveReasoningParser("auto", "x</think>")).toBe("deepseek_r1");
    expect(resolveReasoningParser("none", "x</think>")).toBeNull();
    expect(resolveReasoningParser("qwen3", null)).toBe("qwen3");
  });
});
