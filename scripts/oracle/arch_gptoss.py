"""gptoss: OpenAI's gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE, general.architecture "gpt-oss").

As llama.cpp's converter writes it (conversion/gpt_oss.py) and src/models/openai-moe.cpp reads it:
- attention: q, k, v and output projections with biases, a sink logit per head
  (blk.N.attn_sinks.weight), NEOX rotary (no q/k row permutation) with YaRN
  (rope.scaling.type yarn, factor 32 over an original context of 4096, base 150000);
- even layers slide over attention.sliding_window entries, odd ones see everything (llama.cpp's
  pattern 2); the window is small here (32, or random_gguf.py --sliding-window) so that a few
  hundred positions run well past it;
- blk.N.post_attention_norm is the norm before the FFN;
- the FFN is a mixture of experts: router ffn_gate_inp (+ bias), experts ffn_gate_exps /
  ffn_up_exps / ffn_down_exps ([experts][rows][cols], + biases), top-k of the router's logits
  weighted by the softmax over the chosen ones, SwiGLU with clamp 7 and α 1.702.

Architecture options (random_gguf.py --arch-option KEY=VALUE):
  experts=N (default 4), experts_used=K (default 2), expert_ffn=N (default --ffn),
  expert_type=f32|mxfp4|mxfp4-random
                          the experts' type (mxfp4: quantized by gguf-py, the rest F32, as
                          llama.cpp's converter leaves a gpt-oss checkpoint: only experts in MXFP4),
  zero_experts=1          every gate expert, gate bias and down bias zero: each layer's FFN then
                          adds exactly 0 (gate 0 → SwiGLU 0 → down bias 0), so llama.cpp computes
                          the attention layers alone (the attention check without the FFN).
"""
import gguf
import numpy as np

GGUF_ARCH = "gpt-oss"
MODEL_NAME = "random gpt-oss"
TOKENIZER_PRE = "gpt-4o"  # o200k's pre-tokenizer, as gpt-oss files carry
SLIDING_WINDOW = 32
ROPE_BASE = 150000.0
YARN_FACTOR = 32.0
YARN_ORIGINAL_CONTEXT = 4096


def write(writer, rng, shape, tensor):
    options = shape.options
    experts = int(options.get("experts", 4))
    used = int(options.get("experts_used", 2))
    expert_ffn = int(options.get("expert_ffn", shape.ffn))
    expert_type = options.get("expert_type", "f32")
    zero = options.get("zero_experts", "0") == "1"
    if expert_type not in ("f32", "mxfp4", "mxfp4-random"):
        raise SystemExit(f"--arch-option expert_type={expert_type}: expected f32, mxfp4 or mxfp4-random")
    if not 0 < used <= experts:
        raise SystemExit(f"--arch-option experts_used={used}: expected 1..experts ({experts})")

    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(YARN_FACTOR)
    writer.add_rope_scaling_orig_ctx_len(YARN_ORIGINAL_CONTEXT)
    writer.add_sliding_window(shape.sliding_window or SLIDING_WINDOW)
    writer.add_expert_count(experts)
    writer.add_expert_used_count(used)
    writer.add_expert_feed_forward_length(expert_ffn)

    def vector(name, n, scale=0.1, offset=0.0):
        writer.add_tensor(name, (offset + scale * rng.standard_normal(n)).astype(np.float32))

    def experts_tensor(name, rows, cols, zeroed=False):
        if expert_type == "mxfp4-random" and not zeroed:
            writer.add_tensor(name, random_mxfp4(experts, rows, cols), raw_dtype=gguf.GGMLQuantizationType.MXFP4)
            return
        # Drawn in float32 (no float64 temporaries: gpt-oss-20b's shape has 265M values a tensor).
        if zeroed:
            values = np.zeros((experts, rows, cols), dtype=np.float32)
        else:
            values = rng.standard_normal((experts, rows, cols), dtype=np.float32)
            values *= np.float32(1 / np.sqrt(cols))
        if expert_type == "mxfp4":
            from gguf import quants

            writer.add_tensor(name, quants.quantize(values, gguf.GGMLQuantizationType.MXFP4), raw_dtype=gguf.GGMLQuantizationType.MXFP4)
        else:
            writer.add_tensor(name, values)

    def random_mxfp4(count, rows, cols):
        # MXFP4 blocks drawn directly (ggml's block_mxfp4: an E8M0 scale byte, then 16 bytes of
        # 4-bit E2M1 values): seconds instead of quantizing floats (about 2 minutes a layer at
        # gpt-oss-20b's shape), for speed benchmarks, where the values do not matter. Scales near
        # 2^-(3 + log2(cols)/2) put the values at about 1/sqrt(cols), as the float draws.
        if cols % 32:
            raise SystemExit(f"mxfp4-random: {cols} columns are not whole 32-blocks")
        blocks = rng.integers(0, 256, size=(count, rows, cols // 32, 17), dtype=np.uint8)
        center = 127 - 3 - int(round(np.log2(cols) / 2))
        blocks[..., 0] = rng.integers(center - 1, center + 2, size=(count, rows, cols // 32), dtype=np.uint8)
        return blocks.reshape(count, rows, cols // 32 * 17)

    q_rows, kv_rows = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    tensor("token_embd.weight", shape.vocab, shape.hidden)
    for i in range(shape.layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", shape.hidden)
        tensor(p + "attn_q.weight", q_rows, shape.hidden)
        vector(p + "attn_q.bias", q_rows)
        tensor(p + "attn_k.weight", kv_rows, shape.hidden)
        vector(p + "attn_k.bias", kv_rows)
        tensor(p + "attn_v.weight", kv_rows, shape.hidden)
        vector(p + "attn_v.bias", kv_rows)
        tensor(p + "attn_output.weight", shape.hidden, q_rows)
        vector(p + "attn_output.bias", shape.hidden)
        # Sinks around e^2 of the scores' scale: each takes a real share of its head's softmax.
        vector(p + "attn_sinks.weight", shape.heads, scale=1.0, offset=2.0)
        tensor(p + "post_attention_norm.weight", shape.hidden)
        tensor(p + "ffn_gate_inp.weight", experts, shape.hidden)
        vector(p + "ffn_gate_inp.bias", experts)
        experts_tensor(p + "ffn_gate_exps.weight", expert_ffn, shape.hidden, zeroed=zero)
        experts_tensor(p + "ffn_up_exps.weight", expert_ffn, shape.hidden)
        experts_tensor(p + "ffn_down_exps.weight", shape.hidden, expert_ffn)
        writer.add_tensor(p + "ffn_gate_exps.bias", np.zeros((experts, expert_ffn), np.float32) if zero else (0.1 * rng.standard_normal((experts, expert_ffn))).astype(np.float32))
        writer.add_tensor(p + "ffn_up_exps.bias", (0.1 * rng.standard_normal((experts, expert_ffn))).astype(np.float32))
        writer.add_tensor(p + "ffn_down_exps.bias", np.zeros((experts, shape.hidden), np.float32) if zero else (0.1 * rng.standard_normal((experts, shape.hidden))).astype(np.float32))
    tensor("output_norm.weight", shape.hidden)
    tensor("output.weight", shape.vocab, shape.hidden)
