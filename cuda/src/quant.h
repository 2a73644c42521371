// ggml's quantized block formats as GGUF stores them (a row of `cols` elements is cols / block
// elements consecutive blocks), their scalar reference dequantization, and the activation
// format the integer dot products take.
//
//   Q8_0  32 el: f16 d, int8 q[32];                       x[i] = d·q[i]
//   Q4_0  32 el: f16 d, u8 qs[16];  x[j] = d·((qs[j] & 15) − 8), x[j+16] = d·((qs[j] >> 4) − 8)
//   Q4_K 256 el: f16 d, f16 dmin, u8 scales[12] (8 six-bit scales and 8 six-bit mins),
//                u8 qs[128]: 64-element chunk c (0..3) reads qs[32c..32c+32): low nibbles are
//                sub-block 2c, high nibbles sub-block 2c+1; x = d·sc[s]·q − dmin·m[s]
//   Q6_K 256 el: u8 ql[128], u8 qh[64], int8 scales[16], f16 d; per 128-element half h
//                (ql += 64h, qh += 32h, scales += 8h), l < 32:
//                  x[l]    = d·sc[l/16]    ·((ql[l]    & 15 | (qh[l] >> 0 & 3) << 4) − 32)
//                  x[l+32] = d·sc[2 + l/16]·((ql[l+32] & 15 | (qh[l] >> 2 & 3) << 4) − 32)
//                  x[l+64] = d·sc[4 + l/16]·((ql[l]    >> 4 | (qh[l] >> 4 & 3) << 4) − 32)
//                  x[l+96] = d·sc[6 + l/16]·((ql[l+32] >> 4 | (qh[l] >> 6 & 3) << 4) − 32)
//   Q2_K, Q3_K, Q5_K, IQ4_XS: quant_superblock.h.
//
// Activations are quantized per 32 elements (ActBlock): an f32 scale, int8 values in
// [−127, 127] (never −128, so a sign flip cannot overflow) and the sums of each 16-element half
// (for the offsets of Q4_0, the mins of Q4_K and the −32 of Q6_K). Decode's K-quant kernels on
// AVX-512 VNNI take them per 256 elements instead (ActSuperBlock, as llama.cpp's Q8_K): one
// scale a super-block lets the integer products of a whole super-block add up in int32.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend.h"

namespace ctxr {

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210,
              "ggml block sizes");

struct ActBlock {
  float d;
  int16_t sum[2];  // Σ q over elements 0..15 and 16..31
  int8_t q[32];
};

// 256 activations with one f32 scale, 64-byte aligned so that a 64-element chunk is one load.
struct alignas(64) ActSuperBlock {
  int8_t q[256];
  int16_t sum16[16];  // Σ q over elements 16j..16j+15
  float d;
};

bool dtype_quantized(DType t);
int dtype_block_elements(DType t);  // 1 for F32/F16/BF16
size_t dtype_block_bytes(DType t);
size_t dtype_row_bytes(DType t, int cols);  // cols must be a multiple of the block elements

// Q4_K's six-bit scale and min of sub-block j (0..7).
void q4k_scale_min(const uint8_t* scales, int j, int& scale, int& min);

// One row of `cols` elements of `t` (any DType) to float32: the reference.
void dequantize_row(DType t, const void* row, int cols, float* out);

// x[0..cols) (cols a multiple of 32) to cols / 32 activation blocks: d = max|x| / 127.
void quantize_activations(const float* x, int cols, ActBlock* out);
// cols a multiple of 256; the same rounding (to nearest, ties to even) and clamp as per 32.
void quantize_activations_256(const float* x, int cols, ActSuperBlock* out);

// float32 to IEEE half bits (round to nearest even), for tests and the CUDA build's widening.
uint16_t f32_to_f16_bits(float f);

}  // namespace ctxr
