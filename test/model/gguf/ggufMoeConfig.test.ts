/** qwen3moe GGUF metadata as a Qwen3MoeForCausalLM config.json (src/model/gguf/ggufMoeConfig.ts). */
import { describe, expect, test } from "bun:test";
import { GgufMetadataError } from "../../../src/model/gguf/ggufMetadataValues.ts";
import { ggufModelConfig } from "../../../src/model/gguf/ggufModelConfig.ts";

// Qwen3-30B-A3B's keys, as llama.cpp's converter writes them.
const base: [string, unknown][] = [
  ["general.architecture", "qwen3moe"],
  ["qwen3moe.context_length", 40960],
  ["qwen3moe.embedding_length", 2048],
  ["qwen3moe.block_count", 48],
  ["qwen3moe.feed_forward_length", 6144],
  ["qwen3moe.attention.head_count", 32],
  ["qwen3moe.attention.head_count_kv", 4],
  ["qwen3moe.attention.key_length", 128],
  ["qwen3moe.rope.freq_base", 1000000],
  ["qwen3moe.vocab_size", 151936],
  ["qwen3moe.expert_count", 128],
  ["qwen3moe.expert_used_count", 8],
  ["qwen3moe.expert_feed_forward_length", 768],
];

describe("qwen3moe GGUF config", () => {
  test("the experts' fields of a Qwen3-30B-A3B file", () => {
    const config = ggufModelConfig(new Map(base), []);
    expect(config.architecture).toBe("qwen3moe");
    expect(config.headDim).toBe(128);
    expect(config.configJson).toMatchObject({
      architectures: ["Qwen3MoeForCausalLM"],
      model_type: "qwen3_moe",
      num_experts: 128,
      num_experts_per_tok: 8,
      moe_intermediate_size: 768,
      norm_topk_prob: true,
    });
  });

  test("without expert_feed_forward_length: llama.cpp's feed_forward_length / expert_used_count", () => {
    const config = ggufModelConfig(new Map(base.filter(([key]) => key !== "qwen3moe.expert_feed_forward_length")), []);
    expect(config.configJson.moe_intermediate_size).toBe(768);
  });

  test("bad expert keys are named", () => {
    const without = (key: string) => new Map(base.filter(([k]) => k !== key));
    expect(() => ggufModelConfig(without("qwen3moe.expert_count"), [])).toThrow(/qwen3moe\.expert_count/);
    const tooMany = new Map([...base, ["qwen3moe.expert_used_count", 129]] as [string, unknown][]);
    expect(() => ggufModelConfig(tooMany, [])).toThrow(GgufMetadataError);
    expect(() => ggufModelConfig(tooMany, [])).toThrow(/expert_used_count \(129\) is above qwen3moe\.expert_count \(128\)/);
  });
});
