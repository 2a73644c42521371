"""qwen3: a Llama-style decoder with GQA, no QKV bias, and an RMSNorm of each q and k head before
RoPE (llama.cpp's LLM_ARCH_QWEN3 tensor names: blk.N.attn_q_norm / attn_k_norm, head_dim long).

head_dim may differ from hidden / heads (pass --head-dim, e.g. hidden 256, heads 4, head_dim 96).
The chat template is Qwen3-0.6B's own (templates/qwen3.jinja, as bundled with llama.cpp's
models/templates), with its `enable_thinking` switch.
"""
import os

import arch_llama

TOKENIZER_PRE = "qwen2"
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "qwen3.jinja"), encoding="utf-8") as f:
    CHAT_TEMPLATE = f.read()


def write(writer, rng, shape, tensor):
    # The tensors are llama's in the same order, plus attn_q_norm / attn_k_norm after attn_q / attn_k.
    arch_llama.write(writer, rng, shape, tensor, rope_base=1000000.0, qk_norm=True)
