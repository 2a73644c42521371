#!/usr/bin/env python3
"""A vocabulary-only gpt-oss GGUF with the real o200k_harmony tokenizer, written by llama.cpp's gguf-py.

The o200k_base BPE ranks come from js-tiktoken's ranks file (node_modules/js-tiktoken/dist/ranks/
o200k_base.js, a dependency of the LangChain packages this repository's tests use); they are turned
into a byte-level vocabulary and merges as Hugging Face's TikTokenConverter does (gpt-oss's
tokenizer.json was made that way), and the harmony special tokens are added at o200k_harmony's ids
(openai/harmony, tiktoken's o200k_harmony: <|startoftext|> 199998 ... <|call|> 200012, the rest
reserved up to 201088 entries), all control tokens as in gpt-oss's GGUF files. The file says
tokenizer.ggml.model "gpt2", tokenizer.ggml.pre "gpt-4o", bos <|startoftext|>, eos <|return|>,
padding <|endoftext|>, and carries gpt-oss's chat template (--template, e.g. llama.cpp's
models/templates/openai-gpt-oss-120b.jinja) and gpt-oss-20b's hyperparameters, without tensors:
llama.cpp loads it with vocab_only to tokenize.

    /usr/bin/python3 scripts/oracle/o200k_harmony_gguf.py --ranks .../o200k_base.js --out v.gguf
        [--template FILE.jinja] [--gguf-py DIR]   (or GGUF_PY)
"""
import argparse
import base64
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from random_gguf import byte_tokens  # noqa: E402

VOCAB_SIZE = 201088
HARMONY_SPECIAL = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
}


def read_ranks(path):
    """js-tiktoken's ranks file: `export default {..., "bpe_ranks": "! OFFSET TOKEN64 TOKEN64 ...\\n..."}`."""
    with open(path, encoding="utf-8") as f:
        text = f.read().strip()
    data = json.loads(text[text.index("{"): text.rindex("}") + 1])
    ranks = {}
    for line in data["bpe_ranks"].split("\n"):
        if not line:
            continue
        _, offset, *tokens = line.split(" ")
        for i, token in enumerate(tokens):
            ranks[base64.b64decode(token)] = int(offset) + i
    return ranks


def merges_of(ranks):
    """TikTokenConverter's merges: every split of a token into two tokens, ordered by the token's rank, then the parts' ranks."""
    merges = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        local = [(token[:i], token[i:], rank) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    return [(left, right) for left, right, _ in merges]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", required=True, help="js-tiktoken's dist/ranks/o200k_base.js")
    parser.add_argument("--out", required=True)
    parser.add_argument("--template", help="the chat template (tokenizer.chat_template)")
    parser.add_argument("--gguf-py", default=os.environ.get("GGUF_PY"))
    args = parser.parse_args()
    if args.gguf_py:
        sys.path.insert(0, args.gguf_py)
    import gguf

    ranks = read_ranks(args.ranks)
    if sorted(ranks.values()) != list(range(len(ranks))) or len(ranks) != 199998:
        sys.exit(f"{args.ranks}: expected o200k_base's 199998 ranks 0..199997, found {len(ranks)}")
    to_unicode = byte_tokens()
    spell = lambda raw: "".join(to_unicode[b] for b in raw)  # noqa: E731
    tokens = [""] * VOCAB_SIZE
    types = [gguf.TokenType.NORMAL] * VOCAB_SIZE
    for raw, rank in ranks.items():
        tokens[rank] = spell(raw)
    for id in range(199998, VOCAB_SIZE):
        tokens[id] = HARMONY_SPECIAL.get(id, f"<|reserved_{id}|>")
        types[id] = gguf.TokenType.CONTROL
    merges = [f"{spell(left)} {spell(right)}" for left, right in merges_of(ranks)]

    writer = gguf.GGUFWriter(args.out, "gpt-oss")
    writer.add_name("gpt-oss o200k_harmony vocabulary")
    writer.add_context_length(131072)
    writer.add_embedding_length(2880)
    writer.add_block_count(24)
    writer.add_feed_forward_length(2880)
    writer.add_expert_feed_forward_length(2880)
    writer.add_head_count(64)
    writer.add_head_count_kv(8)
    writer.add_key_length(64)
    writer.add_value_length(64)
    writer.add_rope_freq_base(150000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_expert_count(32)
    writer.add_expert_used_count(4)
    writer.add_sliding_window(128)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-4o")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(199998)
    writer.add_eos_token_id(200002)
    writer.add_pad_token_id(199999)
    if args.template:
        with open(args.template, encoding="utf-8") as f:
            writer.add_chat_template(f.read())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(json.dumps({"tokens": len(tokens), "merges": len(merges)}))


if __name__ == "__main__":
    main()
