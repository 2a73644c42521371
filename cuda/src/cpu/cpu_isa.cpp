// Run-time instruction-set choice for the quantized kernels (quant_dot.h).
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/quant_dot.h"

namespace ctxr {

bool cpu_has_avx512_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

CpuIsa detected_cpu_isa() {
  const char* forced = std::getenv("CTXR_CPU_ISA");
  if (forced && std::strcmp(forced, "avx2") == 0) return CpuIsa::Avx2;
  return cpu_has_avx512_vnni() ? CpuIsa::Avx512Vnni : CpuIsa::Avx2;
}

const char* cpu_isa_name(CpuIsa isa) { return isa == CpuIsa::Avx2 ? "avx2" : "avx512-vnni"; }

QuantDotFn quant_dot(DType t, CpuIsa isa) {
  QuantDotFn f = isa == CpuIsa::Avx512Vnni ? quant_dot_avx512(t) : quant_dot_avx2(t);
  if (!f) throw std::invalid_argument("no quantized dot product for this dtype");
  return f;
}

}  // namespace ctxr
