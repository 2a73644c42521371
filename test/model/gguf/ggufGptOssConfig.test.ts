/**
 * ggufGptOssConfig.ts: gpt-oss's config.json fields from GGUF metadata as llama.cpp reads them
 * (even layers sliding by default, experts, YaRN), and errors naming the key; also a file written
 * by llama.cpp's own gguf-py (scripts/oracle/arch_gptoss.py).
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { readGgufFile } from "../../../src/model/gguf/ggufReader.ts";
import { ggufModelConfig } from "../../../src/model/gguf/ggufModelConfig.ts";
import { tempFolder } from "../../helpers/cli.ts";
import { writeRandomGguf } from "../../helpers/llamaOracle.ts";

// gpt-oss-20b's metadata as llama.cpp's converter writes it.
const base: [string, unknown][] = [
  ["general.architecture", "gpt-oss"],
  ["gpt-oss.context_length", 131072],
  ["gpt-oss.embedding_length", 2880],
  ["gpt-oss.block_count", 24],
  ["gpt-oss.feed_forward_length", 2880],
  ["gpt-oss.attention.head_count", 64],
  ["gpt-oss.attention.head_count_kv", 8],
  ["gpt-oss.attention.key_length", 64],
  ["gpt-oss.attention.value_length", 64],
  ["gpt-oss.attention.layer_norm_rms_epsilon", 1e-5],
  ["gpt-oss.attention.sliding_window", 128],
  ["gpt-oss.rope.freq_base", 150000],
  ["gpt-oss.rope.scaling.type", "yarn"],
  ["gpt-oss.rope.scaling.factor", 32],
  ["gpt-oss.rope.scaling.original_context_length", 4096],
  ["gpt-oss.expert_count", 32],
  ["gpt-oss.expert_used_count", 4],
  ["gpt-oss.expert_feed_forward_length", 2880],
  ["gpt-oss.vocab_size", 201088],
];

function configOf(changes: [string, unknown][] = [], removed: string[] = []) {
  const metadata = new Map<string, unknown>([...base, ...changes]);
  for (const key of removed) metadata.delete(key);
  return ggufModelConfig(metadata, []);
}

function errorOf(changes: [string, unknown][], removed: string[] = []): string {
  try {
    configOf(changes, removed);
  } catch (error) {
    return (error as Error).message;
  }
  return "";
}

describe("gpt-oss GGUF config", () => {
  test("gpt-oss-20b's metadata: alternating layers (even ones sliding over 128), 32 experts top-4, YaRN ×32", () => {
    const config = configOf();
    expect(config.architecture).toBe("gpt-oss");
    expect(config.headDim).toBe(64);
    expect(config.configJson).toMatchObject({
      architectures: ["GptOssForCausalLM"],
      model_type: "gpt_oss",
      sliding_window: 128,
      num_local_experts: 32,
      num_experts_per_tok: 4,
      intermediate_size: 2880,
      attention_bias: true,
      rope_theta: 150000,
      rope_scaling: { rope_type: "yarn", factor: 32, original_max_position_embeddings: 4096, beta_fast: 32, beta_slow: 1 },
    });
    const types = config.configJson.layer_types as string[];
    expect(types).toHaveLength(24);
    expect(types.slice(0, 4)).toEqual(["sliding_attention", "full_attention", "sliding_attention", "full_attention"]);
  });

  test("a file's own pattern; no dense feed_forward_length (the experts' width stands in)", () => {
    const pattern = Array.from({ length: 24 }, (_, l) => l % 3 === 0);
    expect(configOf([["gpt-oss.attention.sliding_window_pattern", pattern]]).configJson.layer_types).toEqual(pattern.map((s) => (s ? "sliding_attention" : "full_attention")));
    expect(configOf([], ["gpt-oss.feed_forward_length"]).intermediate).toBe(2880);
  });

  test("bad metadata is refused naming the key", () => {
    expect(errorOf([], ["gpt-oss.attention.sliding_window"])).toMatch(/gpt-oss\.attention\.sliding_window is missing/);
    expect(errorOf([], ["gpt-oss.expert_count"])).toMatch(/gpt-oss\.expert_count is missing/);
    expect(errorOf([["gpt-oss.expert_used_count", 33]])).toMatch(/gpt-oss\.expert_used_count \(33\) exceeds gpt-oss\.expert_count \(32\)/);
    expect(errorOf([["gpt-oss.attention.sliding_window_pattern", [true, false]]])).toMatch(/sliding_window_pattern must be an integer or 24 bools/);
    expect(errorOf([], ["gpt-oss.feed_forward_length", "gpt-oss.expert_feed_forward_length"])).toMatch(/gpt-oss\.expert_feed_forward_length is missing/);
  });

  test("a file from llama.cpp's own gguf-py (arch_gptoss.py) reads as the runner reads it", () => {
    const scratch = tempFolder("ctxr-gptoss-config-");
    try {
      const file = writeRandomGguf("gptoss", join(scratch.path, "g.gguf"), { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, ffn: 64, extraArgs: ["--sliding-window", "32"] });
      const header = readGgufFile(file);
      const config = ggufModelConfig(header.metadata, header.tensors);
      expect(config.attentionBias).toBe(true);
      expect(config.tieWordEmbeddings).toBe(false);
      expect(config.configJson).toMatchObject({ sliding_window: 32, num_local_experts: 4, num_experts_per_tok: 2, layer_types: ["sliding_attention", "full_attention", "sliding_attention", "full_attention"] });
    } finally {
      scratch.cleanup();
    }
  });
});
