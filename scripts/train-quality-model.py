#!/usr/bin/env python3
"""Trains the quality model of issue 12: a small Llama-architecture model (RMSNorm,
rotary embeddings in Hugging Face's rotate_half layout, grouped-query attention,
SwiGLU MLP, untied output projection) on the byte-level tokenizer of `ctxr model
tiny`, over the four task families of src/quality/qualityTasks.ts (mirrored in
scripts/quality_tasks.py), and writes a Hugging Face folder that `ctxr serve --model`
loads: config.json, model.safetensors (F32), tokenizer.json, tokenizer_config.json.

What the model sees: <s>, then exactly the text the benchmark sends as
/v1/completions `segments` (the documents, then the question "?K"), then the
answer and "\n". To get more learning signal per token, a training sequence goes on
with more questions about the same prompt ("?B123\n..."); the first question is
always the one the generator asked, so the benchmark's prompt is a prefix of a
training sequence. The loss is on the answer tokens (their digits and the "\n"),
plus --lm-weight on every other token. Short examples (families lookup,
dependence, order) are packed into rows of --seq tokens with a block-diagonal
causal mask and positions restarting at 0 for each example; retrieval examples
(long) get their own batches every --retrieval-every steps.

Recall drills (training only, --drill-share): a prompt of 2..N records, some of them
referrers, then a question about every record, so the lookup circuit gets many answers
per token of context; N grows from --drill-start-records to --drill-max-records over
--curriculum-steps while the drills' share moves to --drill-share-end. Retrieval
batches start at --retrieval-after, once the lookup has formed on short prompts.

Evaluation: full-prefill greedy exact match per family on held-out seeds, every
--eval-minutes: greedy decoding reproduces answer + "\n" exactly when the argmax at
every answer position (teacher forced) is the right token, so one forward pass per
example decides it. The checkpoint with the best worst-family accuracy is written to
--out (ties: the later); --last-out, when given, gets the final weights.

Deterministic: fixed seeds for weights and data, torch.set_num_threads(--threads);
with --steps and --eval-every the run does the same updates and keeps the same best
checkpoint whatever the machine's speed (the learning-rate schedule and the
evaluations follow steps); with only --minutes it follows the wall clock.

  /usr/bin/python3 scripts/train-quality-model.py --out models/quality --steps 20000 \\
      --minutes 60 --layers 4 --hidden 192 --heads 6 --kv-heads 2 --intermediate 512 \\
      --log models/quality/train.log

Requirements: Debian's python3-torch and libopenblas0-pthread (without OpenBLAS
torch falls back to the reference BLAS, ~10x slower); `npx bun` for the tokenizer
files (written by `ctxr model tiny`).
"""

import argparse
import json
import math
import os
import random as pyrandom
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quality_tasks as qt  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOS, EOS, PAD = 256, 257, 258
VOCAB = 259
RMS_NORM_EPS = 1e-5
SHORT_FAMILIES = ["lookup", "dependence", "order"]


# ---------------------------------------------------------------- model


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_NORM_EPS))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def attention(q, k, v, mask):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def blocked_attention(q, k, v, mask, block):
    """The same attention, --attention-block queries at a time, each block recomputed in the
    backward pass (checkpointed): the T x T scores of a long prompt are never all alive at once
    (at 8,192 tokens they are 1 GB a head group and layer), so long retrieval prompts fit."""
    out = []
    for start in range(0, q.shape[2], block):
        end = min(q.shape[2], start + block)
        # Causal: a block's queries see keys up to its end only.
        args = (q[:, :, start:end], k[:, :, :end], v[:, :, :end], mask[:, :, start:end, :end])
        if torch.is_grad_enabled():
            out.append(torch.utils.checkpoint.checkpoint(attention, *args, use_reentrant=False))
        else:
            out.append(attention(*args))
    return torch.cat(out, dim=2)


class Layer(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention_block = cfg.get("attention_block", 0)
        h, hd = cfg["hidden"], cfg["head_dim"]
        self.heads, self.kv_heads, self.head_dim = cfg["heads"], cfg["kv_heads"], hd
        self.input_layernorm = RMSNorm(h)
        self.q_proj = torch.nn.Linear(h, cfg["heads"] * hd, bias=False)
        self.k_proj = torch.nn.Linear(h, cfg["kv_heads"] * hd, bias=False)
        self.v_proj = torch.nn.Linear(h, cfg["kv_heads"] * hd, bias=False)
        self.o_proj = torch.nn.Linear(cfg["heads"] * hd, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h)
        self.gate_proj = torch.nn.Linear(h, cfg["intermediate"], bias=False)
        self.up_proj = torch.nn.Linear(h, cfg["intermediate"], bias=False)
        self.down_proj = torch.nn.Linear(cfg["intermediate"], h, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        block = self.attention_block
        if block and t > block:
            attn = blocked_attention(q, k, v, mask, block)
        else:
            attn = attention(q, k, v, mask)
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, t, -1))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class QualityLlama(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = torch.nn.Embedding(VOCAB, cfg["hidden"])
        self.layers = torch.nn.ModuleList([Layer(cfg) for _ in range(cfg["layers"])])
        self.norm = RMSNorm(cfg["hidden"])
        self.lm_head = torch.nn.Linear(cfg["hidden"], VOCAB, bias=False)
        hd = cfg["head_dim"]
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        angles = torch.arange(cfg["max_positions"], dtype=torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos_table", angles.cos().float(), persistent=False)
        self.register_buffer("sin_table", angles.sin().float(), persistent=False)
        std = 0.02
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                continue
            scale = std / math.sqrt(2 * cfg["layers"]) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
            torch.nn.init.normal_(p, 0.0, scale)

    def forward(self, ids, positions, segments):
        """ids, positions, segments: [B, T]; attention only within a segment, causal."""
        t = ids.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        mask = (segments[:, :, None] == segments[:, None, :]) & causal[None]
        mask = mask[:, None]
        cos = self.cos_table[positions][:, None]
        sin = self.sin_table[positions][:, None]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))

    def hf_tensors(self):
        """(name, tensor) in Hugging Face Llama names."""
        out = [("model.embed_tokens.weight", self.embed_tokens.weight)]
        for i, layer in enumerate(self.layers):
            p = "model.layers.%d" % i
            out += [
                (p + ".input_layernorm.weight", layer.input_layernorm.weight),
                (p + ".self_attn.q_proj.weight", layer.q_proj.weight),
                (p + ".self_attn.k_proj.weight", layer.k_proj.weight),
                (p + ".self_attn.v_proj.weight", layer.v_proj.weight),
                (p + ".self_attn.o_proj.weight", layer.o_proj.weight),
                (p + ".post_attention_layernorm.weight", layer.post_attention_layernorm.weight),
                (p + ".mlp.gate_proj.weight", layer.gate_proj.weight),
                (p + ".mlp.up_proj.weight", layer.up_proj.weight),
                (p + ".mlp.down_proj.weight", layer.down_proj.weight),
            ]
        out += [("model.norm.weight", self.norm.weight), ("lm_head.weight", self.lm_head.weight)]
        return out


# ---------------------------------------------------------------- checkpoint


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, tensor in tensors:
        data = tensor.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """name -> float32 tensor, for an F32 safetensors file (as write_safetensors makes)."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] != "F32":
            raise SystemExit("--init: %s is %s; only F32 checkpoints can be continued" % (name, entry["dtype"]))
        start, end = entry["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[start:end]), dtype=torch.float32).reshape(entry["shape"])
    return out


def load_folder(model, folder):
    """Weights of a folder save_folder wrote, into a model of the same shape (to continue training)."""
    saved = read_safetensors(os.path.join(folder, "model.safetensors"))
    with torch.no_grad():
        for name, tensor in model.hf_tensors():
            if name not in saved or tuple(saved[name].shape) != tuple(tensor.shape):
                raise SystemExit("--init: %s missing or of another shape in %s" % (name, folder))
            tensor.copy_(saved[name])


def tokenizer_files(max_positions):
    """tokenizer.json and tokenizer_config.json as `ctxr model tiny` writes them."""
    folder = tempfile.mkdtemp(prefix="ctxr-quality-tok-")
    try:
        out = os.path.join(folder, "tiny")
        subprocess.run(
            ["npx", "bun", os.path.join(REPO_ROOT, "src/cli/main.ts"), "model", "tiny", "--out", out, "--max-positions", str(max_positions)],
            check=True, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        return {name: open(os.path.join(out, name), "rb").read() for name in ["tokenizer.json", "tokenizer_config.json"]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def model_config(cfg, command, extra):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": cfg["hidden"],
        "intermediate_size": cfg["intermediate"],
        "num_hidden_layers": cfg["layers"],
        "num_attention_heads": cfg["heads"],
        "num_key_value_heads": cfg["kv_heads"],
        "head_dim": cfg["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": cfg["max_positions"],
        "rms_norm_eps": RMS_NORM_EPS,
        "rope_theta": cfg["rope_theta"],
        "rope_scaling": None,
        "attention_dropout": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "use_cache": True,
        "attention_bias": False,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "ctxr": dict({"generator": command}, **extra),
    }


def save_folder(model, out, tokenizer, command, extra):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        f.write(json.dumps(model_config(model.cfg, command, extra), indent=2) + "\n")
    write_safetensors(os.path.join(out, "model.safetensors.tmp"), model.hf_tensors())
    os.replace(os.path.join(out, "model.safetensors.tmp"), os.path.join(out, "model.safetensors"))
    for name, data in tokenizer.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


# ---------------------------------------------------------------- data


def encode(text):
    return list(text.encode("utf-8"))


def example_tokens(example, extra_questions, rng):
    """(ids, weights-mask of answer targets): <s> prompt answer \\n [more questions]."""
    ids = [BOS] + encode(example["prompt"])
    answer_at = []
    answer = encode(example["answer"] + qt.ANSWER_END)
    answer_at += range(len(ids) - 1, len(ids) - 1 + len(answer))
    ids += answer
    if extra_questions > 0:
        asked = example["question"][1:]
        others = [f for f in example["facts"] if f[0] != asked]
        rng.shuffle(others)
        if example["family"] == "dependence":
            # The referrer among the extras first, when the first question did not ask it.
            referrer_key = example["facts"][example["referrer"]][0]
            others.sort(key=lambda f: f[0] != referrer_key)
        for key, value in others[:extra_questions]:
            q = encode("?%s=" % key)
            ids += q
            a = encode(value + qt.ANSWER_END)
            answer_at += range(len(ids) - 1, len(ids) - 1 + len(a))
            ids += a
    return ids, answer_at


class TrainingData:
    def __init__(self, args):
        self.args = args
        self.rng = pyrandom.Random(args.seed)
        self.index = 0
        self.step = 0
        self.pool = []
        weights = [float(w) for w in args.mix.split(",")]
        self.mix = dict(zip(SHORT_FAMILIES, weights))

    def next_example(self, family, **options):
        seed = qt.example_seed(self.args.seed, self.index)
        self.index += 1
        return qt.quality_example(family, seed, **options)

    def short_example(self):
        family = self.rng.choices(SHORT_FAMILIES, weights=[self.mix[f] for f in SHORT_FAMILIES])[0]
        options = {}
        if family == "dependence":
            options["referrer_percent"] = self.args.referrer_percent
        if family == "order":
            options["order_variant"] = self.rng.choice(["original", "annotated"])
            options["dedup"] = self.rng.random() < 0.5
        return self.next_example(family, **options)

    def drill_tokens(self):
        """A training-only drill (associative recall, MQAR-like): 2..--drill-max-records records,
        some of them referrers ("^^^": the value of the record right before), then a question
        about every record in random order. Many answers per token of context, so the key-matching
        circuit gets far more signal than one question per prompt gives it."""
        rng = self.rng
        count = rng.randint(2, self.drill_records())
        count = min(count, len(qt.KEY_LETTERS))
        keys = rng.sample(list(qt.KEY_LETTERS), count)
        values = ["%03d" % v for v in rng.sample(range(1000), count)]
        shown = list(values)
        for d in range(1, count):
            if shown[d - 1] != qt.REFERENCE_MARK * qt.VALUE_DIGITS and rng.random() < self.args.drill_referrer_share:
                shown[d] = qt.REFERENCE_MARK * qt.VALUE_DIGITS
                values[d] = values[d - 1]
        ids = [BOS] + encode("".join(qt.record(kv) for kv in zip(keys, shown)))
        answer_at = []
        for d in rng.sample(range(count), count):
            ids += encode(qt.question(keys[d]))
            a = encode(values[d] + qt.ANSWER_END)
            answer_at += range(len(ids) - 1, len(ids) - 1 + len(a))
            ids += a
        return ids, answer_at

    def curriculum(self):
        """0 at the start, 1 after --curriculum-steps: drills grow and give way to the real families."""
        if self.args.curriculum_steps <= 0:
            return 1.0
        return min(1.0, self.step / self.args.curriculum_steps)

    def drill_records(self):
        start = min(self.args.drill_start_records, self.args.drill_max_records)
        return round(start + (self.args.drill_max_records - start) * self.curriculum())

    def drill_share(self):
        end = self.args.drill_share if self.args.drill_share_end is None else self.args.drill_share_end
        return self.args.drill_share + (end - self.args.drill_share) * self.curriculum()

    def pooled_tokens(self):
        if self.rng.random() < self.drill_share():
            return self.drill_tokens()
        return example_tokens(self.short_example(), self.args.extra_questions, self.rng)

    def short_batch(self):
        """Rows of --seq tokens packed with whole examples (first fit from a pool of 16 waiting ones)."""
        rows = []
        for _ in range(self.args.batch):
            ids, targets, weights, positions, segments = [], [], [], [], []
            segment = 0
            while True:
                while len(self.pool) < 16:
                    self.pool.append(self.pooled_tokens())
                room = self.args.seq - len(ids)
                at = next((i for i, (tokens, _) in enumerate(self.pool) if len(tokens) <= room), None)
                if at is None:
                    if segment > 0:
                        break
                    tokens, answer_at = self.pool.pop(0)
                    tokens, answer_at = tokens[: self.args.seq], [a for a in answer_at if a < self.args.seq - 1]
                else:
                    tokens, answer_at = self.pool.pop(at)
                w = [self.args.lm_weight] * (len(tokens) - 1) + [0.0]
                for a in answer_at:
                    w[a] = 1.0
                ids += tokens
                targets += tokens[1:] + [PAD]
                weights += w
                positions += range(len(tokens))
                segments += [segment] * len(tokens)
                segment += 1
            pad = self.args.seq - len(ids)
            rows.append((ids + [PAD] * pad, targets + [PAD] * pad, weights + [0.0] * pad, positions + [0] * pad, segments + [-1] * pad))
        return collate(rows)

    def retrieval_batch(self):
        low = max(qt.RECORD_BYTES * 8, self.args.retrieval_min_bytes)
        nbytes = self.rng.randint(low, self.args.retrieval_bytes)
        rows = []
        for _ in range(self.args.retrieval_batch):
            ex = self.next_example("retrieval", retrieval_bytes=nbytes)
            tokens, answer_at = example_tokens(ex, self.args.retrieval_extra_questions, self.rng)
            # The extra questions of a prompt near --max-positions may not fit: drop them.
            tokens, answer_at = tokens[: self.args.max_positions], [a for a in answer_at if a < self.args.max_positions - 1]
            w = [self.args.lm_weight] * (len(tokens) - 1) + [0.0]
            for a in answer_at:
                w[a] = 1.0
            rows.append((tokens, tokens[1:] + [PAD], w, list(range(len(tokens))), [0] * len(tokens)))
        t = max(len(r[0]) for r in rows)
        rows = [(a + [PAD] * (t - len(a)), b + [PAD] * (t - len(b)), c + [0.0] * (t - len(c)), d + [0] * (t - len(d)), e + [-1] * (t - len(e))) for a, b, c, d, e in rows]
        return collate(rows)


def collate(rows):
    ids, targets, weights, positions, segments = zip(*rows)
    return (
        torch.tensor(ids, dtype=torch.long),
        torch.tensor(targets, dtype=torch.long),
        torch.tensor(weights, dtype=torch.float32),
        torch.tensor(positions, dtype=torch.long),
        torch.tensor(segments, dtype=torch.long),
    )


# ---------------------------------------------------------------- evaluation


EVAL_SEED = 0x51A11E  # held out: training uses --seed's stream


def eval_sets(args):
    sets = {}
    for f, family in enumerate(qt.FAMILIES):
        if family == "retrieval" and args.retrieval_every <= 0:
            continue
        count = args.eval_retrieval_count if family == "retrieval" else args.eval_count
        examples = []
        for i in range(count):
            seed = qt.example_seed(EVAL_SEED + f, i)
            if family == "order":
                variant = ["original", "annotated"][i % 2]
                examples.append(qt.quality_example(family, seed, order_variant=variant, dedup=(i // 2) % 2 == 1))
            elif family == "retrieval":
                examples.append(qt.quality_example(family, seed, retrieval_bytes=args.retrieval_bytes))
            else:
                examples.append(qt.quality_example(family, seed))
        sets[family] = examples
    return sets


@torch.no_grad()
def exact_match(model, examples, row_tokens):
    """Share of examples whose greedy continuation is answer + "\\n" (teacher-forced argmax)."""
    model.eval()
    right = 0
    pending = []

    def flush():
        nonlocal right
        if not pending:
            return
        t = max(sum(len(p[0]) for p in row) for row in pending)
        batch = []
        for row in pending:
            ids, positions, segments = [], [], []
            for s, (tokens, _) in enumerate(row):
                ids += tokens
                positions += range(len(tokens))
                segments += [s] * len(tokens)
            pad = t - len(ids)
            batch.append((ids + [PAD] * pad, positions + [0] * pad, segments + [-1] * pad))
        ids, positions, segments = (torch.tensor(x, dtype=torch.long) for x in zip(*batch))
        argmax = model(ids, positions, segments).argmax(-1)
        for r, row in enumerate(pending):
            start = 0
            for tokens, answer_at in row:
                ok = all(int(argmax[r, start + a]) == tokens[a + 1] for a in answer_at)
                right += int(ok)
                start += len(tokens)
        pending.clear()

    row, used = [], 0
    for ex in examples:
        tokens, answer_at = example_tokens(ex, 0, None)
        if row and used + len(tokens) > row_tokens:
            pending.append(row)
            row, used = [], 0
            if len(pending) == 8:
                flush()
        row.append((tokens, answer_at))
        used += len(tokens)
    if row:
        pending.append(row)
    flush()
    model.train()
    return right / max(1, len(examples))


# ---------------------------------------------------------------- main


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for the best checkpoint (Hugging Face layout)")
    p.add_argument("--last-out", help="folder for the final weights too")
    p.add_argument("--minutes", type=float, default=30.0, help="wall-clock budget (training stops at it)")
    p.add_argument("--steps", type=int, default=0, help="steps (the schedule follows steps; 0: follow --minutes)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--max-positions", type=int, default=8192)
    p.add_argument("--seq", type=int, default=384, help="tokens in a packed row of short examples")
    p.add_argument("--batch", type=int, default=12, help="packed rows a step")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--lm-weight", type=float, default=0.02, help="loss weight of the tokens that are not answers")
    p.add_argument("--extra-questions", type=int, default=4, help="more questions after the first, short families")
    p.add_argument("--mix", default="1,2,1.5", help="weights of lookup,dependence,order")
    p.add_argument("--drill-share", type=float, default=0.0, help="share of short examples that are recall drills (training only)")
    p.add_argument("--drill-max-records", type=int, default=16)
    p.add_argument("--drill-start-records", type=int, default=4, help="drill size at the start of the curriculum")
    p.add_argument("--drill-share-end", type=float, help="drill share at the end of the curriculum (default: --drill-share)")
    p.add_argument("--curriculum-steps", type=int, default=0, help="steps over which drills grow from --drill-start-records to --drill-max-records and their share moves to --drill-share-end (0: no curriculum)")
    p.add_argument("--drill-referrer-share", type=float, default=0.15, help="drill: chance a record refers to the one before")
    p.add_argument("--referrer-percent", type=int, default=60, help="dependence: share of first questions asking the referrer")
    p.add_argument("--retrieval-every", type=int, default=4, help="a retrieval batch every N steps (0: none)")
    p.add_argument("--retrieval-after", type=int, default=0, help="no retrieval batches before this step (let the short tasks form the lookup first)")
    p.add_argument("--retrieval-bytes", type=int, default=2048, help="longest retrieval prompt (documents' bytes)")
    p.add_argument("--retrieval-min-bytes", type=int, default=256)
    p.add_argument("--retrieval-batch", type=int, default=2)
    p.add_argument("--retrieval-extra-questions", type=int, default=15)
    p.add_argument("--eval-minutes", type=float, default=5.0, help="evaluate every this many minutes (ignored with --eval-every)")
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every this many steps (deterministic: the best checkpoint does not depend on the machine's speed)")
    p.add_argument("--eval-count", type=int, default=200)
    p.add_argument("--eval-retrieval-count", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log", help="append the log here too")
    p.add_argument("--attention-block", type=int, default=0, help="attend this many queries at a time, recomputing each block in the backward pass (peak memory for long retrieval prompts; 0: whole sequences)")
    p.add_argument("--init", help="start from the weights of this folder (same shape) instead of random ones")
    args = p.parse_args()

    if args.hidden % args.heads or (args.hidden // args.heads) % 2 or args.heads % args.kv_heads:
        p.error("hidden must be a multiple of heads with an even head size, heads a multiple of kv-heads")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    command = "scripts/train-quality-model.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    log_file = open(args.log, "a") if args.log else None

    def log(message):
        line = "[%7.1fs] %s" % (time.time() - started, message)
        print(line, flush=True)
        if log_file:
            log_file.write(line + "\n")
            log_file.flush()

    started = time.time()
    cfg = {
        "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads,
        "head_dim": args.hidden // args.heads, "intermediate": args.intermediate,
        "rope_theta": args.rope_theta, "max_positions": args.max_positions,
        "attention_block": args.attention_block,
    }
    model = QualityLlama(cfg)
    if args.init:
        load_folder(model, args.init)
    params = sum(t.numel() for _, t in model.hf_tensors())
    log("command: %s" % command)
    log("torch %s, %d threads, %d parameters (%.1f MB f32)" % (torch.__version__, torch.get_num_threads(), params, params * 4 / 1e6))
    tokenizer = tokenizer_files(args.max_positions)
    train_started = time.time()

    decay = [p_ for n, p_ in model.named_parameters() if p_.dim() >= 2]
    no_decay = [p_ for n, p_ in model.named_parameters() if p_.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    data = TrainingData(args)
    evals = eval_sets(args)
    budget = args.minutes * 60

    def progress(step):
        if args.steps > 0:
            return step / args.steps
        return (time.time() - started) / budget

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = min(1.0, progress(step))
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))

    best_score, best_step = (-1.0, -1.0), -1
    step, tokens_seen, answer_targets = 0, 0, 0
    window = {"t": time.time(), "steps": 0, "tokens": 0, "loss": 0.0, "answer_loss": 0.0}
    next_eval = time.time() + args.eval_minutes * 60

    def evaluate(final=False):
        nonlocal best_score, best_step
        t0 = time.time()
        acc = {family: exact_match(model, examples, max(args.seq, 512)) for family, examples in evals.items()}
        # The worst family first, the mean breaking ties: a family stuck at 0 must not freeze the best checkpoint.
        score = (min(acc.values()), sum(acc.values()) / len(acc))
        log("eval step %d: %s (worst %.3f, mean %.3f) in %.1fs%s" % (step, " ".join("%s=%.3f" % kv for kv in acc.items()), score[0], score[1], time.time() - t0, " [final]" if final else ""))
        extra = {"step": step, "eval": acc, "eval_seed": EVAL_SEED, "train_seed": args.seed}
        if score >= best_score:
            best_score, best_step = score, step
            save_folder(model, args.out, tokenizer, command, extra)
        if args.last_out:
            # The latest weights at every evaluation: a run stopped early can still be continued (--init).
            save_folder(model, args.last_out, tokenizer, command, extra)
            log("saved best to %s" % args.out)

    model.train()
    while True:
        if args.steps > 0 and step >= args.steps:
            break
        if time.time() - started >= budget:
            break
        data.step = step
        retrieval_step = args.retrieval_every > 0 and step >= args.retrieval_after and step % args.retrieval_every == args.retrieval_every - 1
        ids, targets, weights, positions, segments = data.retrieval_batch() if retrieval_step else data.short_batch()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        logits = model(ids, positions, segments)
        ce = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1), reduction="none").view(targets.shape)
        loss = (ce * weights).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        answer_mask = weights == 1.0
        real = int((segments >= 0).sum())
        tokens_seen += real
        answer_targets += int(answer_mask.sum())
        window["steps"] += 1
        window["tokens"] += real
        window["loss"] += float(loss)
        window["answer_loss"] += float((ce * answer_mask).sum() / answer_mask.sum().clamp(min=1))
        step += 1
        if step % 50 == 0:
            dt = time.time() - window["t"]
            log("step %d lr %.2e loss %.4f answer-loss %.4f | %.2f steps/s %.0f tokens/s | %d tokens, %d answer targets"
                % (step, lr_at(step), window["loss"] / window["steps"], window["answer_loss"] / window["steps"], window["steps"] / dt, window["tokens"] / dt, tokens_seen, answer_targets))
            window = {"t": time.time(), "steps": 0, "tokens": 0, "loss": 0.0, "answer_loss": 0.0}
        if args.eval_every > 0:
            if step % args.eval_every == 0:
                evaluate()
        elif args.eval_minutes > 0 and time.time() >= next_eval:
            evaluate()
            next_eval = time.time() + args.eval_minutes * 60
    elapsed = time.time() - train_started
    log("trained %d steps in %.1fs: %.2f steps/s, %.0f tokens/s" % (step, elapsed, step / elapsed, tokens_seen / elapsed))
    evaluate(final=True)
    log("best worst-family accuracy %.3f (mean %.3f) at step %d (in %s)" % (best_score[0], best_score[1], best_step, args.out))


if __name__ == "__main__":
    main()
