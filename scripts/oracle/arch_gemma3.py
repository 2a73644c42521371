"""gemma3: Google's Gemma 3 text decoder (llama.cpp's LLM_ARCH_GEMMA3 tensor names and metadata).

As llama.cpp's converter writes it (conversion/gemma.py, Gemma3Model): every norm weight holds
1 + w already (Gemma3RMSNorm multiplies by 1 + w), the output is tied to token_embd, the rope base
is the global layers' (local layers take llama.cpp's default 10000: no freq_base_swa key), and
attention.sliding_window is written with the default pattern (every 6th layer global). This file
also scales the global layers' rope linearly, as Gemma 3 4B and larger do. The window is small
(32 entries, or random_gguf.py --sliding-window) so that a few hundred positions run well past it.
"""
import gguf

SLIDING_WINDOW = 32
# random_gguf.py --vocab-type spm: Gemma 3's SentencePiece layout (spm_vocab.py).
SPM_FAMILY = "gemma"
ROPE_SCALING_FACTOR = 8.0

# Gemma 3's chat template, shortened (a system message is put before the first user turn; the
# assistant's role is "model").
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def write(writer, rng, shape, tensor):
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    writer.add_rope_scaling_factor(ROPE_SCALING_FACTOR)
    writer.add_sliding_window(shape.sliding_window or SLIDING_WINDOW)
    tensor("token_embd.weight", shape.vocab, shape.hidden)
    for i in range(shape.layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", shape.hidden)
        tensor(p + "attn_q.weight", shape.heads * shape.head_dim, shape.hidden)
        tensor(p + "attn_k.weight", shape.kv_heads * shape.head_dim, shape.hidden)
        tensor(p + "attn_v.weight", shape.kv_heads * shape.head_dim, shape.hidden)
        tensor(p + "attn_q_norm.weight", shape.head_dim)
        tensor(p + "attn_k_norm.weight", shape.head_dim)
        tensor(p + "attn_output.weight", shape.hidden, shape.heads * shape.head_dim)
        tensor(p + "post_attention_norm.weight", shape.hidden)
        tensor(p + "ffn_norm.weight", shape.hidden)
        tensor(p + "ffn_gate.weight", shape.ffn, shape.hidden)
        tensor(p + "ffn_up.weight", shape.ffn, shape.hidden)
        tensor(p + "ffn_down.weight", shape.hidden, shape.ffn)
        tensor(p + "post_ffw_norm.weight", shape.hidden)
    tensor("output_norm.weight", shape.hidden)
