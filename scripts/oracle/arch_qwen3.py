"""qwen3: a Llama-style decoder with GQA, no QKV bias, and an RMSNorm of each q and k head before
RoPE (llama.cpp's LLM_ARCH_QWEN3 tensor names: blk.N.attn_q_norm / attn_k_norm, head_dim long).

head_dim may differ from hidden / heads (pass --head-dim, e.g. hidden 256, heads 4, head_dim 96).
The chat template is Qwen3-0.6B's own (templates/qwen3.jinja, as bundled with llama.cpp's
models/templates), with its `enable_thinking` switch.
"""
import os

TOKENIZER_PRE = "qwen2"
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "qwen3.jinja"), encoding="utf-8") as f:
    CHAT_TEMPLATE = f.read()


def write(writer, rng, shape, tensor):
    writer.add_rope_freq_base(1000000.0)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
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
        tensor(p + "ffn_gate.weight", shape.ffn, shape.hidden)
        tensor(p + "ffn_up.weight", shape.ffn, shape.hidden)
        tensor(p + "ffn_down.weight", shape.hidden, shape.ffn)
    tensor("output_norm.weight", shape.hidden)
    tensor("output.weight", shape.vocab, shape.hidden)
