// ggml's other 32-element block formats (besides Q8_0 and Q4_0, quant.h), as GGUF stores them
// (ggml-common.h, dequantization as ggml-quants.c). Element j < 16 is the low nibble of qs[j],
// element j + 16 its high nibble; Q5's fifth bit of element i is bit i of the 32-bit qh.
//
//   Q4_1   20 B: f16 d, f16 m, u8 qs[16]            x = d·q + m            q ∈ [0, 15]
//   Q5_0   22 B: f16 d, u8 qh[4], u8 qs[16]         x = d·(q − 16)         q ∈ [0, 31]
//   Q5_1   24 B: f16 d, f16 m, u8 qh[4], u8 qs[16]  x = d·q + m            q ∈ [0, 31]
//   IQ4_NL 18 B: f16 d, u8 qs[16]                   x = d·kIq4nlValues[q]  (non-linear, −127..113)
//   MXFP4  17 B: u8 e (E8M0), u8 qs[16]             x = 2^(e−128)·kMxfp4Values[q]
//                (FP4 E2M1 values doubled, so the E8M0 scale 2^(e−127) is halved)
//
// Every one is x = scale·v + offset with a small integer v (Block32Values): the integer dot
// products take v (or v plus a constant, to make it unsigned) against int8 activations, as
// llama.cpp pairs them with Q8_0 (Q5_0, IQ4_NL, MXFP4) or Q8_1 (Q4_1, Q5_1: the activation sum
// carries the offset m).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend.h"

namespace ctxr {

struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockMXFP4) == 17,
              "ggml block sizes");

extern const int8_t kIq4nlValues[16];
extern const int8_t kMxfp4Values[16];

// Whether t is one of this file's formats; its block bytes (0 otherwise).
bool dtype_block32_family(DType t);
size_t dtype_block32_bytes(DType t);

// 2^(e − 128) (ggml's E8M0 scale, halved), subnormal for e < 2.
inline float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One block as x[i] = scale·v[i] + offset.
struct Block32Values {
  float scale, offset;
  int8_t v[32];
};
void block32_values(DType t, const void* block, Block32Values& out);

// A row of cols / 32 blocks to float32 (the reference, as ggml computes it).
void dequantize_row_block32(DType t, const void* row, int cols, float* out);

}  // namespace ctxr
