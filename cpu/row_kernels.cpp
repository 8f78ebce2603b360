// Which row kernels run: the widest set the CPU has, or STRATA_OPS_ISA's.
#include "cpu/row_kernels.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace strata::cpu {

std::string_view ops_isa_name(OpsIsa isa) { return isa == OpsIsa::avx512 ? "avx512" : "avx2"; }

bool ops_isa_supported(OpsIsa isa) {
  if (isa == OpsIsa::avx2) return true;  // the program's baseline (checked at start-up)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

OpsIsa ops_isa() {
  static const OpsIsa isa = [] {
    const char* env = std::getenv("STRATA_OPS_ISA");
    const std::string s = env ? env : "auto";
    if (s == "auto") return ops_isa_supported(OpsIsa::avx512) ? OpsIsa::avx512 : OpsIsa::avx2;
    STRATA_CHECK(s == "avx2" || s == "avx512", "STRATA_OPS_ISA=" + s + " is not a choice",
                 "set it to auto, avx2 or avx512");
    const OpsIsa want = s == "avx512" ? OpsIsa::avx512 : OpsIsa::avx2;
    STRATA_CHECK(ops_isa_supported(want), "STRATA_OPS_ISA=" + s + ": this CPU has no " + s,
                 "unset STRATA_OPS_ISA or set it to avx2");
    return want;
  }();
  return isa;
}

template <typename T>
const NormRows<T>& norm_rows(OpsIsa isa) {
  static const NormRows<T> avx2 = norm_rows_avx2<T>();
  static const NormRows<T> avx512 = ops_isa_supported(OpsIsa::avx512) ? norm_rows_avx512<T>() : avx2;
  return isa == OpsIsa::avx512 && ops_isa_supported(OpsIsa::avx512) ? avx512 : avx2;
}
template const NormRows<float>& norm_rows<float>(OpsIsa);
template const NormRows<bf16>& norm_rows<bf16>(OpsIsa);
template const NormRows<f16>& norm_rows<f16>(OpsIsa);

template <typename T>
const ActRows<T>& act_rows(OpsIsa isa) {
  static const ActRows<T> avx2 = act_rows_avx2<T>();
  static const ActRows<T> avx512 = ops_isa_supported(OpsIsa::avx512) ? act_rows_avx512<T>() : avx2;
  return isa == OpsIsa::avx512 && ops_isa_supported(OpsIsa::avx512) ? avx512 : avx2;
}
template const ActRows<float>& act_rows<float>(OpsIsa);
template const ActRows<bf16>& act_rows<bf16>(OpsIsa);
template const ActRows<f16>& act_rows<f16>(OpsIsa);

SoftmaxCeRow softmax_ce_row(OpsIsa isa) {
  return isa == OpsIsa::avx512 && ops_isa_supported(OpsIsa::avx512) ? softmax_ce_row_avx512() : softmax_ce_row_avx2();
}

}  // namespace strata::cpu
