#!/usr/bin/env python3
"""Random-weight GGUF files written by llama.cpp's own gguf-py, for checking ctxr against llama.cpp.

The file carries llama.cpp's tensor names and metadata for the architecture, a small byte-level
BPE vocabulary (gpt2 model: the 256 byte tokens, a few merges, chat special tokens) and a chat
template, so that llama.cpp loads it, tokenizes with it and computes logits we compare with ours.

    /usr/bin/python3 scripts/oracle/random_gguf.py --arch llama --out m.gguf [--seed 1]
        [--hidden 256] [--layers 2] [--heads 4] [--kv-heads 2] [--ffn 512] [--context 4096]
        [--sliding-window N]   (architectures with sliding-window layers; default theirs)
        [--vocab N] [--dtype f32|f16] [--vocab-type gpt2|spm] [--name NAME] [--special TOKEN ...]
        [--split-max-tensors N]   (parts m-00001-of-0000K.gguf, ... in place of m.gguf)

--vocab N pads the vocabulary with ordinary tokens (never produced by the merges) up to N entries,
so that the embedding and output matrices have a real model's size (Qwen3: 151936, Gemma 3:
262144): they dominate a small model's decode. --dtype f16 stores the matrices as F16 (half the
disk and memory of a ~1B-parameter file; llama.cpp's quantizer reads either). --special TOKEN
(repeatable) adds a control token after the default ones, e.g. Gemma 3's <start_of_turn> and
<end_of_turn>, which its template writes and which a real Gemma 3 file holds as control tokens.

--vocab-type spm writes a SentencePiece ("llama"-model) vocabulary instead, laid out as llama.cpp's
converter writes the architecture's family (SPM_FAMILY in its module: Gemma 3's or Phi-3's; see
spm_vocab.py), with the family's control tokens, flags and chat template.

gguf-py comes from the llama.cpp source in the node-llama-cpp package (numpy only): --gguf-py DIR
or the GGUF_PY environment variable names its folder.

Each architecture is a module arch_<name>.py beside this file with
    def write(writer, rng, shape, tensor) -> None
that adds its metadata (beyond the common keys written here) and its tensors; `tensor(name, rows,
cols)` makes a random matrix of llama.cpp's layout (numpy shape (rows, cols): rows outputs of cols
inputs), `tensor(name, n)` a vector.
"""
import argparse
import importlib
import os
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    context: int
    vocab: int
    options: dict
    sliding_window: int = 0  # 0: the architecture's own default


def byte_tokens():
    """GPT-2's byte-to-unicode mapping: the 256 byte tokens of a byte-level BPE vocabulary."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    by_byte = dict(zip(printable, chars))
    return [chr(by_byte[b]) for b in range(256)]


MERGES = ["Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s", "a t"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def vocabulary(size=0, extra_special=()):
    """The byte tokens, the merges' tokens, the special tokens (and `extra_special`), then padding up to `size` entries."""
    tokens = byte_tokens()
    for merge in MERGES:
        tokens.append(merge.replace(" ", ""))
    first_special = len(tokens)
    special = SPECIAL + [token for token in extra_special if token not in SPECIAL]
    tokens += special
    types = [1] * first_special + [3] * len(special)  # NORMAL, CONTROL
    if size and size < len(tokens):
        sys.exit(f"--vocab {size} is below the {len(tokens)} tokens the file needs")
    padding = max(0, size - len(tokens))
    # Ordinary tokens no merge produces: distinct strings of byte-level characters ("Ġ" never
    # starts one, so none is a word the pre-tokenizer could form from a merge).
    tokens += [f"pad{i}" for i in range(padding)]
    types += [1] * padding
    return tokens, types, first_special


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=0, help="default hidden / heads")
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--arch-option", action="append", default=[], metavar="KEY=VALUE", help="an architecture module's own setting (shape.options)")
    parser.add_argument("--sliding-window", type=int, default=0, help="sliding-window layers' window (default: the architecture's)")
    parser.add_argument("--vocab", type=int, default=0, help="pad the vocabulary to this many tokens")
    parser.add_argument("--special", action="append", default=[], metavar="TOKEN", help="another control token, after the default ones")
    parser.add_argument("--dtype", choices=["f32", "f16"], default="f32", help="the matrices' type (norms stay f32)")
    parser.add_argument("--vocab-type", choices=["gpt2", "spm"], default="gpt2", help="byte-level BPE (default) or SentencePiece")
    parser.add_argument("--name", help="general.name (llama.cpp sets token attributes by it: a name containing phi3 or phi-3 right-strips its special tokens)")
    parser.add_argument("--split-max-tensors", type=int, default=0, help="split the file in parts of at most this many tensors, as gguf-split (OUT-00001-of-0000N.gguf, ...); the weights are those of the unsplit file")
    parser.add_argument("--gguf-py", default=os.environ.get("GGUF_PY"))
    args = parser.parse_args()
    if args.gguf_py:
        sys.path.insert(0, args.gguf_py)
    import numpy as np
    import gguf

    try:
        arch = importlib.import_module(f"arch_{args.arch}")
    except ModuleNotFoundError:
        known = sorted(f[5:-3] for f in os.listdir(HERE) if f.startswith("arch_") and f.endswith(".py"))
        sys.exit(f"unknown --arch {args.arch} (known: {', '.join(known)})")
    if args.vocab_type == "spm":
        from spm_vocab import spm_vocabulary

        spm = spm_vocabulary(getattr(arch, "SPM_FAMILY", args.arch), args.vocab, chat_template=getattr(arch, "CHAT_TEMPLATE", None))
        tokens = spm.tokens
    else:
        spm = None
        tokens, types, first_special = vocabulary(args.vocab, args.special)
    options = {}
    for option in args.arch_option:
        key, sep, value = option.partition("=")
        if not sep:
            sys.exit(f"--arch-option {option}: expected KEY=VALUE")
        options[key] = value
    shape = Shape(args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim or args.hidden // args.heads, args.ffn, args.context, len(tokens), options, args.sliding_window)
    rng = np.random.default_rng(args.seed)

    writer = gguf.GGUFWriter(args.out, getattr(arch, "GGUF_ARCH", args.arch), split_max_tensors=args.split_max_tensors)
    writer.add_name(args.name or getattr(arch, "MODEL_NAME", f"random {args.arch}"))
    writer.add_file_type(1 if args.dtype == "f16" else 0)  # MOSTLY_F16 / ALL_F32
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(shape.vocab)
    if spm is not None:
        spm.write(writer)
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(options.get("tokenizer_pre", getattr(arch, "TOKENIZER_PRE", "default")))
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(MERGES)
        writer.add_bos_token_id(first_special)
        writer.add_eos_token_id(first_special + 2)
        writer.add_add_bos_token(False)
        writer.add_chat_template(getattr(arch, "CHAT_TEMPLATE", CHAT_TEMPLATE))

    matrix_dtype = np.float16 if args.dtype == "f16" else np.float32

    def tensor(name, rows, cols=None):
        if cols is None:  # a norm weight: around 1 so that activations keep their scale
            writer.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(rows)).astype(np.float32))
        elif matrix_dtype is np.float32:  # the draws every existing fixture was made with
            writer.add_tensor(name, (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32))
        else:  # drawn in float32: a ~1B-parameter file in seconds, without float64 temporaries
            values = rng.standard_normal((rows, cols), dtype=np.float32)
            values *= np.float32(1 / np.sqrt(cols))
            writer.add_tensor(name, values.astype(matrix_dtype))

    tensor.matrix_dtype = matrix_dtype  # for an architecture's own tensors (3-D experts: arch_qwen3moe.py)
    arch.write(writer, rng, shape, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
