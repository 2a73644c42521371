#include "cpu/quant_gemm32.h"

#include "quant_blocks32.h"

namespace ctxr {

bool gemm32_format(DType t, int& zero, bool& offset) {
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: zero = 0, offset = true; return true;
    case DType::Q5_0: zero = 16, offset = false; return true;
    case DType::IQ4_NL: zero = 128, offset = false; return true;
    case DType::MXFP4: zero = 12, offset = false; return true;
    default: return false;
  }
}

void gemm32_unpack_row(DType t, const uint8_t* row, int k, uint8_t* u, float* s, float* o) {
  int zero = 0;
  bool offset = false;
  gemm32_format(t, zero, offset);
  const size_t bytes = dtype_block32_bytes(t);
  Block32Values b;
  for (int i = 0; i < k / 32; i++, u += 32) {
    block32_values(t, row + i * bytes, b);
    s[i] = b.scale;
    if (offset) o[i] = b.offset;
    for (int j = 0; j < 32; j++) u[j] = static_cast<uint8_t>(b.v[j] + zero);
  }
}

}  // namespace ctxr
