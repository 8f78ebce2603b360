#include "cpu/gemm_path.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "cpu/gemm_amx.h"
#include "cpu/gemm_bf16.h"

namespace strata::cpu {

GemmCpu this_gemm_cpu() {
  GemmCpu c;
  c.amx_bf16 = amx_ready();
  c.avx512_bf16 = gemm_bf16_supported();
  c.amd = __builtin_cpu_is("amd");
  return c;
}

LowpGemm default_lowp_gemm(const GemmCpu& cpu) {
  if (cpu.amx_bf16) return LowpGemm::onednn;
  if (cpu.avx512_bf16 && cpu.amd) return LowpGemm::strata;
  return LowpGemm::off;
}

LowpGemm lowp_gemm_mode() {
  static const LowpGemm mode = [] {
    const char* v = std::getenv("STRATA_LOWP_GEMM");
    const std::string s = v ? v : "auto";
    if (s == "auto") return default_lowp_gemm(this_gemm_cpu());
    if (s == "off" || s == "0") return LowpGemm::off;
    if (s == "onednn" || s == "1") return LowpGemm::onednn;
    if (s == "strata") return gemm_bf16_supported() ? LowpGemm::strata : LowpGemm::off;
    throw_error("STRATA_LOWP_GEMM=" + s + " is not a choice", "set it to auto, strata, onednn or off");
  }();
  return mode;
}

std::string_view lowp_gemm_name(LowpGemm path) {
  switch (path) {
    case LowpGemm::strata:
      return "strata";
    case LowpGemm::onednn:
      return "onednn";
    case LowpGemm::off:
      break;
  }
  return "panels";
}

}  // namespace strata::cpu
