"""qwen3moe: Qwen3's attention (per-head q/k RMSNorm, no QKV bias) with a mixture-of-experts FFN in
every layer (llama.cpp's LLM_ARCH_QWEN3MOE): a router blk.N.ffn_gate_inp [experts x hidden] (softmax
over all experts, top-k, the k weights renormalised), and the experts' gate, up and down matrices as
3-D tensors blk.N.ffn_{gate,up,down}_exps [experts, rows, cols]; no shared expert.

Architecture options (--arch-option KEY=VALUE): experts (default 8), experts_used (2), expert_ffn
(64). The chat template is Qwen3's (templates/qwen3.jinja), which Qwen3-30B-A3B's file carries too.
"""
import numpy as np

import arch_qwen3

GGUF_ARCH = "qwen3moe"
TOKENIZER_PRE = arch_qwen3.TOKENIZER_PRE
CHAT_TEMPLATE = arch_qwen3.CHAT_TEMPLATE


def write(writer, rng, shape, tensor):
    experts = int(shape.options.get("experts", 8))
    used = int(shape.options.get("experts_used", 2))
    ffn = int(shape.options.get("expert_ffn", 64))
    writer.add_rope_freq_base(1000000.0)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_expert_count(experts)
    writer.add_expert_used_count(used)
    writer.add_expert_feed_forward_length(ffn)

    dtype = getattr(tensor, "matrix_dtype", np.float32)

    def experts_tensor(name, rows, cols):
        # numpy (experts, rows, cols): gguf dims [cols, rows, experts], llama.cpp's {n_in, n_out, n_expert}
        if dtype is np.float32:
            writer.add_tensor(name, (rng.standard_normal((experts, rows, cols)) / np.sqrt(cols)).astype(np.float32))
            return
        values = rng.standard_normal((experts, rows, cols), dtype=np.float32)  # drawn in float32: fast at bench sizes
        values *= np.float32(1 / np.sqrt(cols))
        writer.add_tensor(name, values.astype(dtype))

    tensor("token_embd.weight", shape.vocab, shape.hidden)
    for i in range(shape.layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", shape.hidden)
        tensor(p + "attn_q.weight", shape.heads * shape.head_dim, shape.hidden)
        tensor(p + "attn_q_norm.weight", shape.head_dim)
        tensor(p + "attn_k.weight", shape.kv_heads * shape.head_dim, shape.hidden)
        tensor(p + "attn_k_norm.weight", shape.head_dim)
        tensor(p + "attn_v.weight", shape.kv_heads * shape.head_dim, shape.hidden)
        tensor(p + "attn_output.weight", shape.hidden, shape.heads * shape.head_dim)
        tensor(p + "ffn_norm.weight", shape.hidden)
        tensor(p + "ffn_gate_inp.weight", experts, shape.hidden)
        experts_tensor(p + "ffn_gate_exps.weight", ffn, shape.hidden)
        experts_tensor(p + "ffn_up_exps.weight", ffn, shape.hidden)
        experts_tensor(p + "ffn_down_exps.weight", shape.hidden, ffn)
    tensor("output_norm.weight", shape.hidden)
    tensor("output.weight", shape.vocab, shape.hidden)
