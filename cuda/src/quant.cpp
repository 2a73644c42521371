#include "quant.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "halfs.h"
#include "quant_blocks32.h"
#include "quant_superblock.h"

namespace ctxr {

bool dtype_quantized(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_K || t == DType::Q6_K || dtype_block32_family(t) || dtype_is_superblock(t);
}

int dtype_block_elements(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: return 32;
    case DType::Q4_K: case DType::Q6_K: return 256;
    default: return dtype_block32_family(t) ? 32 : dtype_is_superblock(t) ? 256 : 1;
  }
}

size_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::Q8_0: return sizeof(BlockQ8_0);
    case DType::Q4_0: return sizeof(BlockQ4_0);
    case DType::Q4_K: return sizeof(BlockQ4_K);
    case DType::Q6_K: return sizeof(BlockQ6_K);
    default: return dtype_block32_family(t) ? dtype_block32_bytes(t) : superblock_bytes(t);
  }
}

size_t dtype_row_bytes(DType t, int cols) {
  if (cols % dtype_block_elements(t) != 0) throw std::invalid_argument("row length is not a multiple of the block size");
  return static_cast<size_t>(cols / dtype_block_elements(t)) * dtype_block_bytes(t);
}

void q4k_scale_min(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void dequantize_row(DType t, const void* row, int cols, float* out) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16:
      widen_to_f32(row, static_cast<int>(t), cols, out);
      return;
    case DType::Q8_0:
      for (int b = 0; b < cols / 32; b++) {
        const auto& blk = static_cast<const BlockQ8_0*>(row)[b];
        const float d = f16_to_f32(blk.d);
        for (int i = 0; i < 32; i++) out[32 * b + i] = d * blk.qs[i];
      }
      return;
    case DType::Q4_0:
      for (int b = 0; b < cols / 32; b++) {
        const auto& blk = static_cast<const BlockQ4_0*>(row)[b];
        const float d = f16_to_f32(blk.d);
        for (int j = 0; j < 16; j++) {
          out[32 * b + j] = d * ((blk.qs[j] & 15) - 8);
          out[32 * b + j + 16] = d * ((blk.qs[j] >> 4) - 8);
        }
      }
      return;
    case DType::Q4_K:
      for (int b = 0; b < cols / 256; b++) {
        const auto& blk = static_cast<const BlockQ4_K*>(row)[b];
        const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
        float* y = out + 256 * b;
        for (int c = 0; c < 4; c++) {
          int sc0, m0, sc1, m1;
          q4k_scale_min(blk.scales, 2 * c, sc0, m0);
          q4k_scale_min(blk.scales, 2 * c + 1, sc1, m1);
          const uint8_t* q = blk.qs + 32 * c;
          for (int l = 0; l < 32; l++) {
            y[64 * c + l] = d * sc0 * (q[l] & 15) - dmin * m0;
            y[64 * c + 32 + l] = d * sc1 * (q[l] >> 4) - dmin * m1;
          }
        }
      }
      return;
    case DType::Q6_K:
      for (int b = 0; b < cols / 256; b++) {
        const auto& blk = static_cast<const BlockQ6_K*>(row)[b];
        const float d = f16_to_f32(blk.d);
        for (int h = 0; h < 2; h++) {
          const uint8_t* ql = blk.ql + 64 * h;
          const uint8_t* qh = blk.qh + 32 * h;
          const int8_t* sc = blk.scales + 8 * h;
          float* y = out + 256 * b + 128 * h;
          for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            y[l] = d * sc[is] * (((ql[l] & 15) | (qh[l] & 3) << 4) - 32);
            y[l + 32] = d * sc[is + 2] * (((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) - 32);
            y[l + 64] = d * sc[is + 4] * (((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32);
            y[l + 96] = d * sc[is + 6] * (((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32);
          }
        }
      }
      return;
    default:
      if (dtype_block32_family(t)) {
        dequantize_row_block32(t, row, cols, out);
        return;
      }
      dequantize_superblock_row(t, row, cols, out);  // throws for a type that is not a super-block
      return;
  }
}

namespace {

// The scale of `n` activations: d = max|v| / 127 (and 1/d, 0 for an all-zero run).
float activation_scale(const float* v, int n, float& inv) {
  float amax = 0.f;
  for (int i = 0; i < n; i++) amax = std::max(amax, std::fabs(v[i]));
  inv = amax > 0 ? 127.f / amax : 0.f;
  return amax / 127.f;
}

// 16 activations times inv, rounded to nearest even and clamped to [−127, 127]; their sum.
int16_t quantize16(const float* v, float inv, int8_t* q) {
  int sum = 0;
  for (int i = 0; i < 16; i++) {
    q[i] = static_cast<int8_t>(std::max(-127, std::min(127, static_cast<int>(std::nearbyint(v[i] * inv)))));
    sum += q[i];
  }
  return static_cast<int16_t>(sum);
}

}  // namespace

void quantize_activations(const float* x, int cols, ActBlock* out) {
  for (int b = 0; b < cols / 32; b++) {
    const float* v = x + 32 * b;
    ActBlock& a = out[b];
    float inv;
    a.d = activation_scale(v, 32, inv);
    for (int h = 0; h < 2; h++) a.sum[h] = quantize16(v + 16 * h, inv, a.q + 16 * h);
  }
}

void quantize_activations_256(const float* x, int cols, ActSuperBlock* out) {
  for (int b = 0; b < cols / 256; b++) {
    const float* v = x + 256 * b;
    ActSuperBlock& a = out[b];
    float inv;
    a.d = activation_scale(v, 256, inv);
    for (int j = 0; j < 16; j++) a.sum16[j] = quantize16(v + 16 * j, inv, a.q + 16 * j);
  }
}

uint16_t f32_to_f16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return static_cast<uint16_t>(sign | 0x7C00 | (abs > 0x7F800000 ? 0x200 : 0));
  if (abs >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds past the largest half
  if (abs < 0x38800000) {  // subnormal half (or zero): value / 2^-24, rounded to nearest even
    float a;
    std::memcpy(&a, &abs, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.f)));
  }
  const uint32_t mantissa_rounded = abs + 0xFFF + ((abs >> 13) & 1);
  return static_cast<uint16_t>(sign | ((mantissa_rounded - 0x38000000) >> 13));
}

}  // namespace ctxr
