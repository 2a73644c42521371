#include "quant_blocks32.h"

#include <cstring>
#include <stdexcept>

#include "halfs.h"

namespace ctxr {

const int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

bool dtype_block32_family(DType t) { return dtype_block32_bytes(t) != 0; }

size_t dtype_block32_bytes(DType t) {
  switch (t) {
    case DType::Q4_1: return sizeof(BlockQ4_1);
    case DType::Q5_0: return sizeof(BlockQ5_0);
    case DType::Q5_1: return sizeof(BlockQ5_1);
    case DType::IQ4_NL: return sizeof(BlockIQ4_NL);
    case DType::MXFP4: return sizeof(BlockMXFP4);
    default: return 0;
  }
}

namespace {

void nibbles(const uint8_t* qs, int8_t* v) {
  for (int j = 0; j < 16; j++) {
    v[j] = static_cast<int8_t>(qs[j] & 15);
    v[j + 16] = static_cast<int8_t>(qs[j] >> 4);
  }
}

void add_fifth_bits(const uint8_t* qh, int8_t* v) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int i = 0; i < 32; i++) v[i] = static_cast<int8_t>(v[i] | ((h >> i) & 1) << 4);
}

void lookup(const int8_t* table, int8_t* v) {
  for (int i = 0; i < 32; i++) v[i] = table[static_cast<uint8_t>(v[i])];
}

}  // namespace

void block32_values(DType t, const void* block, Block32Values& out) {
  switch (t) {
    case DType::Q4_1: {
      const auto& b = *static_cast<const BlockQ4_1*>(block);
      out.scale = f16_to_f32(b.d), out.offset = f16_to_f32(b.m);
      nibbles(b.qs, out.v);
      return;
    }
    case DType::Q5_0: {
      const auto& b = *static_cast<const BlockQ5_0*>(block);
      out.scale = f16_to_f32(b.d), out.offset = 0.f;
      nibbles(b.qs, out.v);
      add_fifth_bits(b.qh, out.v);
      for (int8_t& v : out.v) v = static_cast<int8_t>(v - 16);
      return;
    }
    case DType::Q5_1: {
      const auto& b = *static_cast<const BlockQ5_1*>(block);
      out.scale = f16_to_f32(b.d), out.offset = f16_to_f32(b.m);
      nibbles(b.qs, out.v);
      add_fifth_bits(b.qh, out.v);
      return;
    }
    case DType::IQ4_NL: {
      const auto& b = *static_cast<const BlockIQ4_NL*>(block);
      out.scale = f16_to_f32(b.d), out.offset = 0.f;
      nibbles(b.qs, out.v);
      lookup(kIq4nlValues, out.v);
      return;
    }
    case DType::MXFP4: {
      const auto& b = *static_cast<const BlockMXFP4*>(block);
      out.scale = e8m0_to_f32_half(b.e), out.offset = 0.f;
      nibbles(b.qs, out.v);
      lookup(kMxfp4Values, out.v);
      return;
    }
    default: throw std::invalid_argument("block32_values: not a 32-element block format of quant_blocks32.h");
  }
}

void dequantize_row_block32(DType t, const void* row, int cols, float* out) {
  const size_t bytes = dtype_block32_bytes(t);
  Block32Values b;
  for (int i = 0; i < cols / 32; i++) {
    block32_values(t, static_cast<const uint8_t*>(row) + i * bytes, b);
    for (int j = 0; j < 32; j++) out[32 * i + j] = b.v[j] * b.scale + b.offset;  // as ggml: q·d + m (+ 0)
  }
}

}  // namespace ctxr
