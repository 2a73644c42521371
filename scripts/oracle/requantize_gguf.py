#!/usr/bin/env python3
"""A copy of an F32 GGUF file with its weight matrices quantized by llama.cpp's own gguf-py
(gguf/quants.py), for types llama.cpp's quantizer does not put into a dense model: MXFP4
(llama_model_quantize's MXFP4_MOE mode quantizes only mixture-of-experts tensors, the rest Q8_0).

    GGUF_PY=/work/llama/llama.cpp-src/gguf-py /usr/bin/python3 scripts/oracle/requantize_gguf.py \
        IN.gguf OUT.gguf --type MXFP4 [--keep output.weight]

Every 2-D tensor whose rows hold whole blocks of the type is quantized (the token embedding too);
vectors and the --keep names stay as they are. Metadata is copied as is (general.file_type is
left at its value: llama.cpp reads each tensor's own type).
"""
import argparse
import os
import sys

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--type", required=True, help="a GGMLQuantizationType name gguf-py can quantize, e.g. MXFP4")
    parser.add_argument("--keep", action="append", default=[], help="a tensor name to copy unchanged")
    parser.add_argument("--gguf-py", default=os.environ.get("GGUF_PY"))
    args = parser.parse_args()
    if args.gguf_py:
        sys.path.insert(0, args.gguf_py)
    import gguf
    from gguf import quants

    qtype = gguf.GGMLQuantizationType[args.type]
    block, _ = gguf.GGML_QUANT_SIZES[qtype]
    reader = gguf.GGUFReader(args.input)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(args.output, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        if tensor.tensor_type != gguf.GGMLQuantizationType.F32:
            raise SystemExit(f"{tensor.name}: the input must be all F32, this tensor is {tensor.tensor_type.name}")
        data = np.asarray(tensor.data, dtype=np.float32)
        if data.ndim == 2 and data.shape[1] % block == 0 and tensor.name not in args.keep:
            writer.add_tensor(tensor.name, quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
