#!/usr/bin/env python3
"""Random blocks of ggml quantized types and their dequantization by llama.cpp's own gguf-py
(gguf/quants.py), as a fixture that the runner's and the TypeScript dequantizers are checked
against (cuda/test/quant_superblock_test.cpp, test/model/gguf/dequantSuperblock.test.ts).

    GGUF_PY=/work/llama/llama.cpp-src/gguf-py /usr/bin/python3 scripts/oracle/dequant_fixture.py \
        --out cuda/test/fixtures/superblock_dequant.bin [--types Q2_K,Q3_K,Q5_K,IQ4_XS] [--blocks 8]

File layout (little-endian), one record a type: u32 ggml type id, u32 block count, u32 bytes,
the blocks' bytes, then 4-byte f32 values (block count × block elements). Block bytes are random
except each f16 scale (d, dmin), which is drawn as a finite value of modest size.
"""
import argparse
import os
import struct
import sys

import numpy as np

# Byte offsets of the f16 scale fields, per type (ggml-common.h).
SCALE_OFFSETS = {"Q2_K": [80, 82], "Q3_K": [108], "Q5_K": [0, 2], "IQ4_XS": [0], "Q4_K": [0, 2], "Q6_K": [208]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--types", default="Q2_K,Q3_K,Q5_K,IQ4_XS")
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--gguf-py", default=os.environ.get("GGUF_PY"))
    args = parser.parse_args()
    if not args.gguf_py:
        sys.exit("name llama.cpp's gguf-py folder with --gguf-py or GGUF_PY")
    sys.path.insert(0, args.gguf_py)
    from gguf import GGMLQuantizationType, quants
    from gguf.constants import GGML_QUANT_SIZES

    rng = np.random.default_rng(args.seed)
    with open(args.out, "wb") as out:
        for name in args.types.split(","):
            qtype = GGMLQuantizationType[name]
            elements, block_bytes = GGML_QUANT_SIZES[qtype]
            raw = rng.integers(0, 256, size=(args.blocks, block_bytes), dtype=np.uint8)
            for at in SCALE_OFFSETS[name]:
                scale = (rng.uniform(0.001, 0.05, size=args.blocks) * rng.choice([-1, 1], size=args.blocks)).astype(np.float16)
                raw[:, at:at + 2] = scale.view(np.uint8).reshape(args.blocks, 2)
            values = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
            assert values.size == args.blocks * elements
            out.write(struct.pack("<III", int(qtype), args.blocks, raw.size))
            out.write(raw.tobytes())
            out.write(values.astype("<f4").tobytes())


if __name__ == "__main__":
    main()
