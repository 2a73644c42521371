#!/usr/bin/env python3
"""Reference logits for a Llama-family checkpoint, for testing ctxr's model runner.

An independent forward pass written directly in PyTorch from the architecture's
definition -- no transformers, no safetensors package: the checkpoint is read with
struct/json and torch.frombuffer. It supports what the runner must support:

  * RMSNorm (weight * x / sqrt(mean(x^2) + rms_norm_eps)),
  * rotary position embeddings in Hugging Face's layout (rotate_half: the first and
    second halves of each head are the pairs), rope_theta, and rope_scaling of type
    "llama3" (Llama 3.1) or "linear",
  * grouped-query attention (query head h reads key/value head h // (heads/kv_heads))
    with a causal mask and softmax(q k^T / sqrt(head_dim)),
  * the SwiGLU MLP: down(silu(gate(x)) * up(x)),
  * q/k/v (and o) projection biases when the checkpoint has them (Qwen2),
  * tied embeddings (tie_word_embeddings, or no lm_head.weight with tying on),
  * weights in F32, F16 or BF16 (computed in float64 by default).

It writes a JSON fixture: the command that made the checkpoint, the sha256 of its
files, the prompt's token ids, the logits at every position of prompt + greedy
continuation, the greedy tokens with their top-1/top-2 margins, and "sensitivity":
how far the logits move when one part of the architecture is done wrong (no RoPE,
interleaved RoPE pairs, no causal mask, wrong head grouping, float32 instead of
float64, ...) -- each far above the runner's 1e-4 tolerance, so matching the
fixture to 1e-4 means getting every part right.

Requirements: Python 3 with PyTorch (Debian: apt-get install -y python3-torch, which
is torch 1.13 for /usr/bin/python3). Tests never run this script; they read the
fixture it wrote.

The committed fixture test/fixtures/engine/tiny-reference.json was made with
(from the repository root):

  /usr/bin/python3 scripts/reference-logits.py --tiny-args="--seed 1" \\
      --text "Hello, ctxr!" --new-tokens 8 --out test/fixtures/engine/tiny-reference.json

and test/fixtures/engine/tiny-variant-reference.json (Qwen2-style q/k/v biases, tied
embeddings, llama3 rope_scaling, bf16 weights, 6 heads over 2 key/value heads) with

  /usr/bin/python3 scripts/reference-logits.py --tiny-args="--seed 2 --hidden 96 \
      --heads 6 --kv-heads 2 --intermediate 160 --dtype bf16 --rope-theta 500000 \
      --rope-scaling llama3 --tie-embeddings --qkv-bias" \
      --text "The quick brown fox jumps over the lazy dog; ctxr reuses the KV cache." \
      --new-tokens 8 --out test/fixtures/engine/tiny-variant-reference.json

Each fixture also records its own command (fixture_command) and the checkpoint's
(model_command, model_args, model_sha256); the tests regenerate the checkpoint from
model_args and compare the hashes, so a change to the generator that alters the
weights shows up at once (regenerate the fixtures with the commands above).

--tiny-args runs `npx bun src/cli/main.ts model tiny --out TMPDIR ARGS` first; with
--model DIR an existing checkpoint is used instead. --text is tokenized with the
checkpoint's byte-level tokenizer (<s>, then one token per UTF-8 byte); --ids takes
token ids directly (comma-separated).
"""

import argparse
import hashlib
import json
import math
import os
import shlex
import struct
import subprocess
import sys
import tempfile

import torch

SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
}
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
MODEL_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fail(message):
    sys.exit(f"reference-logits: {message}")


# ---------------------------------------------------------------- checkpoint


def read_safetensors(path):
    """{name: tensor} from one .safetensors file, with the header checked."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail(f"{path}: shorter than 8 bytes")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > 100 * 1024 * 1024 or 8 + header_len > len(data):
        fail(f"{path}: bad header length {header_len}")
    header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    buffer = memoryview(data)[8 + header_len :]
    tensors = {}
    covered = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = entry["dtype"]
        if dtype not in SAFETENSORS_DTYPES:
            fail(f"{path}: tensor {name} has unsupported dtype {dtype}")
        shape = entry["shape"]
        begin, end = entry["data_offsets"]
        count = math.prod(shape)
        if end - begin != count * DTYPE_BYTES[dtype] or end > len(buffer):
            fail(f"{path}: tensor {name}: offsets {begin}..{end} do not fit {dtype} {shape}")
        covered += end - begin
        raw = bytearray(buffer[begin:end])
        tensor = torch.frombuffer(raw, dtype=SAFETENSORS_DTYPES[dtype]) if count > 0 else torch.empty(0, dtype=SAFETENSORS_DTYPES[dtype])
        tensors[name] = tensor.reshape(shape)
    if covered != len(buffer):
        fail(f"{path}: tensors cover {covered} of {len(buffer)} buffer bytes")
    return tensors


def load_checkpoint(folder):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    files = sorted(name for name in os.listdir(folder) if name.endswith(".safetensors"))
    if not files:
        fail(f"{folder}: no .safetensors file")
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(os.path.join(folder, name)))
    return config, tensors


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------- tokenizer


def bytes_to_unicode():
    """GPT-2's printable stand-in character for each byte."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def byte_level_ids(folder, text):
    """<s> + one token per UTF-8 byte, through the checkpoint's tokenizer.json vocab."""
    with open(os.path.join(folder, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    vocab = tokenizer["model"]["vocab"]
    special = {token["content"]: token["id"] for token in tokenizer.get("added_tokens", [])}
    table = bytes_to_unicode()
    ids = [special["<s>"]]
    for byte in text.encode("utf-8"):
        if table[byte] not in vocab:
            fail("the tokenizer is not byte-level (byte %d missing); pass --ids" % byte)
        ids.append(vocab[table[byte]])
    return ids


# ---------------------------------------------------------------- the model


class Llama:
    """A Llama-family decoder; `variant` switches one part to a wrong form (sensitivity)."""

    def __init__(self, config, tensors, dtype):
        self.dtype = dtype
        act = config.get("hidden_act", "silu")
        if act != "silu":
            fail(f"hidden_act {act} is not supported")
        if config.get("partial_rotary_factor", 1.0) != 1.0:
            fail("partial_rotary_factor is not supported")
        self.hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads") or self.heads
        self.head_dim = config.get("head_dim") or self.hidden // self.heads
        self.layers = config["num_hidden_layers"]
        self.eps = config.get("rms_norm_eps", 1e-6)
        self.theta = config.get("rope_theta", 10000.0)
        self.rope_scaling = config.get("rope_scaling")
        self.vocab = config["vocab_size"]
        if self.heads % self.kv_heads != 0:
            fail("num_attention_heads is not a multiple of num_key_value_heads")
        self.w = {name: t.to(dtype) for name, t in tensors.items()}
        tie = config.get("tie_word_embeddings", False)
        if tie or "lm_head.weight" not in self.w:
            if not tie:
                fail("no lm_head.weight and tie_word_embeddings is false")
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.tied = tie

    def has(self, name):
        return name in self.w

    def linear(self, x, name, variant):
        y = x @ self.w[name + ".weight"].T
        if self.has(name + ".bias") and not variant.get("no_bias"):
            y = y + self.w[name + ".bias"]
        return y

    def rms_norm(self, x, name, variant):
        eps = variant.get("eps", self.eps)
        return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * self.w[name]

    def inverse_frequencies(self, variant):
        d = self.head_dim
        exponents = torch.arange(0, d, 2, dtype=torch.float64) / d
        inv_freq = 1.0 / (torch.tensor(float(self.theta), dtype=torch.float64) ** exponents)
        scaling = self.rope_scaling
        if scaling is None or variant.get("no_rope_scaling"):
            return inv_freq
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind in (None, "default"):
            return inv_freq
        if kind == "linear":
            return inv_freq / scaling["factor"]
        if kind == "llama3":
            factor = scaling["factor"]
            low = scaling["low_freq_factor"]
            high = scaling["high_freq_factor"]
            old_context = scaling["original_max_position_embeddings"]
            low_freq_wavelen = old_context / low
            high_freq_wavelen = old_context / high
            result = []
            for f in inv_freq.tolist():
                wavelen = 2 * math.pi / f
                if wavelen < high_freq_wavelen:
                    result.append(f)
                elif wavelen > low_freq_wavelen:
                    result.append(f / factor)
                else:
                    smooth = (old_context / wavelen - low) / (high - low)
                    result.append((1 - smooth) * f / factor + smooth * f)
            return torch.tensor(result, dtype=torch.float64)
        fail(f"rope_scaling type {kind} is not supported")

    def rotate(self, x, positions, variant):
        """x: (heads, T, head_dim) -> x with rotary embeddings at `positions`."""
        if variant.get("no_rope"):
            return x
        inv_freq = self.inverse_frequencies(variant)
        angles = torch.tensor(positions, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, d/2)
        cos = torch.cos(angles).to(self.dtype)
        sin = torch.sin(angles).to(self.dtype)
        half = self.head_dim // 2
        if variant.get("interleaved_rope"):
            # The GPT-J / Meta-original layout: pairs are (2i, 2i+1) -- wrong for HF checkpoints.
            x0, x1 = x[..., 0::2], x[..., 1::2]
            out = torch.empty_like(x)
            out[..., 0::2] = x0 * cos - x1 * sin
            out[..., 1::2] = x0 * sin + x1 * cos
            return out
        x0, x1 = x[..., :half], x[..., half:]
        return torch.cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)

    def attention(self, h, layer, positions, variant):
        T = h.shape[0]
        prefix = f"model.layers.{layer}.self_attn"
        q = self.linear(h, prefix + ".q_proj", variant).view(T, self.heads, self.head_dim).transpose(0, 1)
        k = self.linear(h, prefix + ".k_proj", variant).view(T, self.kv_heads, self.head_dim).transpose(0, 1)
        v = self.linear(h, prefix + ".v_proj", variant).view(T, self.kv_heads, self.head_dim).transpose(0, 1)
        q = self.rotate(q, positions, variant)
        k = self.rotate(k, positions, variant)
        group = self.heads // self.kv_heads
        if variant.get("wrong_grouping"):
            kv_of_head = [h % self.kv_heads for h in range(self.heads)]
        else:
            kv_of_head = [h // group for h in range(self.heads)]
        k = k[kv_of_head]
        v = v[kv_of_head]
        scores = (q @ k.transpose(1, 2)) / math.sqrt(self.head_dim)  # (heads, T, T)
        if not variant.get("no_causal_mask"):
            pos = torch.tensor(positions)
            visible = pos[None, :] <= pos[:, None]  # key j visible to query i
            scores = scores.masked_fill(~visible, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(0, 1).reshape(T, self.heads * self.head_dim)
        return self.linear(out, prefix + ".o_proj", variant)

    def mlp(self, h, layer, variant):
        prefix = f"model.layers.{layer}.mlp"
        gate = self.linear(h, prefix + ".gate_proj", variant)
        up = self.linear(h, prefix + ".up_proj", variant)
        return self.linear(torch.nn.functional.silu(gate) * up, prefix + ".down_proj", variant)

    def logits(self, ids, positions=None, variant=None):
        variant = variant or {}
        positions = list(range(len(ids))) if positions is None else positions
        for token in ids:
            if not 0 <= token < self.vocab:
                fail(f"token id {token} is outside the vocab of {self.vocab}")
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]
        for layer in range(self.layers):
            prefix = f"model.layers.{layer}"
            x = x + self.attention(self.rms_norm(x, prefix + ".input_layernorm.weight", variant), layer, positions, variant)
            x = x + self.mlp(self.rms_norm(x, prefix + ".post_attention_layernorm.weight", variant), layer, variant)
        x = self.rms_norm(x, "model.norm.weight", variant)
        return x @ self.w["lm_head.weight"].T


def greedy(model, prompt, new_tokens):
    """Greedy continuation (full recompute each step) and each step's top-1 minus top-2 margin."""
    sequence = list(prompt)
    generated, margins = [], []
    for _ in range(new_tokens):
        last = model.logits(sequence)[-1]
        top = torch.topk(last, 2)
        generated.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        sequence.append(generated[-1])
    return generated, margins


def max_abs(a, b):
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max())


# ---------------------------------------------------------------- main


def fixture_json(fixture):
    """One top-level field a line, one row of logits a line."""
    lines = []
    for key, value in fixture.items():
        if key == "logits":
            rows = ",\n  ".join(json.dumps(row) for row in value)
            lines.append(f' "logits": [\n  {rows}\n ]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="checkpoint folder (config.json + *.safetensors)")
    source.add_argument("--tiny-args", help="write the checkpoint with `ctxr model tiny ARGS` (e.g. \"--seed 1\")")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--text", help="prompt text (byte-level tokenizer: <s> + UTF-8 bytes)")
    prompt.add_argument("--ids", help="prompt token ids, comma-separated")
    parser.add_argument("--new-tokens", type=int, default=8, help="greedy tokens to generate (default 8)")
    parser.add_argument("--precision", choices=["float64", "float32"], default="float64")
    parser.add_argument("--out", required=True, help="fixture JSON to write")
    args = parser.parse_args()
    if sys.byteorder != "little":
        fail("needs a little-endian machine")
    torch.set_num_threads(1)  # one summation order

    with tempfile.TemporaryDirectory(prefix="ctxr-reference-") as scratch:
        if args.tiny_args is not None:
            folder = os.path.join(scratch, "model")
            tiny_args = ["model", "tiny", *shlex.split(args.tiny_args)]
            command = ["npx", "bun", "src/cli/main.ts", *tiny_args[:2], "--out", folder, *tiny_args[2:]]
            subprocess.run(command, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
            model_command = "ctxr " + shlex.join(tiny_args[:2] + ["--out", "DIR"] + tiny_args[2:])
        else:
            folder = args.model
            tiny_args = None
            model_command = None
        config, tensors = load_checkpoint(folder)
        hashes = {name: sha256_of(os.path.join(folder, name)) for name in MODEL_FILES if os.path.exists(os.path.join(folder, name))}
        prompt_ids = byte_level_ids(folder, args.text) if args.text is not None else [int(t) for t in args.ids.split(",")]

    dtype = torch.float64 if args.precision == "float64" else torch.float32
    model = Llama(config, tensors, dtype)
    generated, margins = greedy(model, prompt_ids, args.new_tokens)
    sequence = prompt_ids + generated
    logits = model.logits(sequence)
    for step, token in enumerate(generated):
        if int(torch.argmax(logits[len(prompt_ids) - 1 + step])) != token:
            fail(f"greedy step {step}: the full-sequence logits disagree with the step's argmax")

    sensitivity = {}
    variants = {
        "float32_instead_of_float64": None,
        "no_rope": {"no_rope": True},
        "interleaved_rope_pairs": {"interleaved_rope": True},
        "no_causal_mask": {"no_causal_mask": True},
        "kv_head_h_mod_kv_heads": {"wrong_grouping": True},
        "rms_norm_eps_off_by_10x": {"eps": model.eps * 10},
    }
    if model.rope_scaling:
        variants["no_rope_scaling"] = {"no_rope_scaling": True}
    if any(name.endswith(".bias") for name in model.w):
        variants["no_biases"] = {"no_bias": True}
    if model.kv_heads == model.heads:
        del variants["kv_head_h_mod_kv_heads"]
    for name, variant in variants.items():
        if variant is None:
            other = Llama(config, tensors, torch.float32 if dtype == torch.float64 else torch.float64)
            sensitivity[name] = max_abs(logits, other.logits(sequence))
        else:
            sensitivity[name] = max_abs(logits, model.logits(sequence, variant=variant))

    fixture_command = "/usr/bin/python3 scripts/reference-logits.py " + shlex.join(sys.argv[1:])
    fixture = {
        "description": "Reference logits of a Llama-family checkpoint from scripts/reference-logits.py "
        "(an independent PyTorch forward pass); the model runner must match them to <= 1e-4 max abs "
        "difference and produce the same greedy tokens.",
        "model_command": model_command,
        "model_args": tiny_args,
        "model_sha256": hashes,
        "fixture_command": fixture_command,
        "reference": {
            "script": "scripts/reference-logits.py",
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "precision": args.precision,
            "logits_rounding": "9 significant digits",
        },
        "config": {
            key: config.get(key)
            for key in [
                "architectures",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "vocab_size",
                "rms_norm_eps",
                "rope_theta",
                "rope_scaling",
                "tie_word_embeddings",
                "torch_dtype",
            ]
        },
        "prompt_text": args.text,
        "prompt_ids": prompt_ids,
        "generated_ids": generated,
        "greedy_margins": [float("%.6g" % m) for m in margins],
        "sequence_ids": sequence,
        "positions": list(range(len(sequence))),
        "logits_shape": [len(sequence), model.vocab],
        "sensitivity_max_abs": {name: float("%.6g" % value) for name, value in sensitivity.items()},
        "logits": [[float("%.9g" % value) for value in row] for row in logits.tolist()],
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(fixture_json(fixture))
    print(
        f"reference-logits: {len(sequence)} positions x {model.vocab} logits -> {args.out}; "
        f"generated {generated}; min greedy margin {min(margins) if margins else 0:.4g}; "
        f"sensitivity {json.dumps(fixture['sensitivity_max_abs'])}"
    )


if __name__ == "__main__":
    main()
