"""phi3: Phi-3 / Phi-3.5 / Phi-4-mini (llama.cpp's LLM_ARCH_PHI3 tensor names, src/models/phi3.cpp).

Fused q|k|v in attn_qkv and gate|up in ffn_up (2·ffn rows, gate first), no ffn_gate; NEOX rotary.
Options (random_gguf.py --arch-option KEY=VALUE):
  rope_dim        rotated dimensions per head (Phi-4-mini: 3/4 of head_dim); default head_dim
  original_ctx    LongRoPE: rope.scaling.original_context_length; with it, the file carries
                  rope_factors_long/short.weight and rope.scaling.attn_factor computed as
                  llama.cpp's converter does (sqrt(1 + ln(s) / ln(original)), s = context / original)
  sliding_window  attention.sliding_window (llama.cpp ignores it for phi3); default 0
  tied            1: no output.weight (the output is the token embedding)
  tokenizer_pre   tokenizer.ggml.pre (random_gguf.py's; Phi-4-mini: gpt-4o)
"""
import math

# llama.cpp marks special tokens right-stripping for a general.name containing "phi3" or
# "phi-3", and then needs the SentencePiece tokens </s>, <unk>, <s> our small BPE vocabulary lacks.
MODEL_NAME = "random phi 4 mini"
# random_gguf.py --vocab-type spm: Phi-3's SentencePiece layout and chat template (spm_vocab.py).
SPM_FAMILY = "phi3"


def write(writer, rng, shape, tensor):
    import numpy as np

    rope_dim = int(shape.options.get("rope_dim", shape.head_dim))
    original = int(shape.options.get("original_ctx", "0"))
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(rope_dim)
    writer.add_sliding_window(int(shape.options.get("sliding_window", "0")))
    if original:
        writer.add_rope_scaling_orig_ctx_len(original)
        scale = shape.context / original
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0)
        # Divisors of the rotary frequencies: long ones grow with the wavelength as Phi-3's do.
        half = rope_dim // 2
        ramp = np.linspace(0.0, 1.0, half)
        writer.add_tensor("rope_factors_long.weight", (1.0 + 15.0 * ramp ** 2 + 0.2 * rng.random(half)).astype(np.float32))
        writer.add_tensor("rope_factors_short.weight", (1.0 + 0.5 * ramp + 0.05 * rng.random(half)).astype(np.float32))
    q = shape.heads * shape.head_dim
    kv = shape.kv_heads * shape.head_dim
    tensor("token_embd.weight", shape.vocab, shape.hidden)
    for i in range(shape.layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", shape.hidden)
        tensor(p + "attn_qkv.weight", q + 2 * kv, shape.hidden)
        tensor(p + "attn_output.weight", shape.hidden, q)
        tensor(p + "ffn_norm.weight", shape.hidden)
        tensor(p + "ffn_up.weight", 2 * shape.ffn, shape.hidden)
        tensor(p + "ffn_down.weight", shape.hidden, shape.ffn)
    tensor("output_norm.weight", shape.hidden)
    if shape.options.get("tied") != "1":
        tensor("output.weight", shape.vocab, shape.hidden)
