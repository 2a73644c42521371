"""llama: the Llama 2/3 decoder (llama.cpp's LLM_ARCH_LLAMA tensor names)."""


def write(writer, rng, shape, tensor, rope_base=10000.0, qk_norm=False):
    """The Llama decoder's metadata and tensors; qk_norm adds Qwen3's per-head q/k norm weights."""
    writer.add_rope_freq_base(rope_base)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    tensor("token_embd.weight", shape.vocab, shape.hidden)
    for i in range(shape.layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", shape.hidden)
        tensor(p + "attn_q.weight", shape.heads * shape.head_dim, shape.hidden)
        if qk_norm:
            tensor(p + "attn_q_norm.weight", shape.head_dim)
        tensor(p + "attn_k.weight", shape.kv_heads * shape.head_dim, shape.hidden)
        if qk_norm:
            tensor(p + "attn_k_norm.weight", shape.head_dim)
        tensor(p + "attn_v.weight", shape.kv_heads * shape.head_dim, shape.hidden)
        tensor(p + "attn_output.weight", shape.hidden, shape.heads * shape.head_dim)
        tensor(p + "ffn_norm.weight", shape.hidden)
        tensor(p + "ffn_gate.weight", shape.ffn, shape.hidden)
        tensor(p + "ffn_up.weight", shape.ffn, shape.hidden)
        tensor(p + "ffn_down.weight", shape.hidden, shape.ffn)
    tensor("output_norm.weight", shape.hidden)
    tensor("output.weight", shape.vocab, shape.hidden)
