#include "cpu/quant_dot32.h"
#include "quant_blocks32.h"

namespace ctxr {

float quant_dot32_reference(DType t, const void* w, const ActBlock* a, int nb) {
  const size_t bytes = dtype_block32_bytes(t);
  double sum = 0;
  Block32Values v;
  for (int b = 0; b < nb; b++) {
    block32_values(t, static_cast<const uint8_t*>(w) + b * bytes, v);
    int products = 0;
    for (int i = 0; i < 32; i++) products += v.v[i] * a[b].q[i];
    sum += (static_cast<double>(v.scale) * products + static_cast<double>(v.offset) * (a[b].sum[0] + a[b].sum[1])) * a[b].d;
  }
  return static_cast<float>(sum);
}

}  // namespace ctxr
