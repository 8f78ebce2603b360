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

namespace {

// A set's AVX-512 build where asked for and the CPU has it, else its AVX2 build; each made
// once (per Set: static locals of the instantiation).
template <typename Set>
const Set& choose(OpsIsa isa, Set (*avx2_set)(), Set (*avx512_set)()) {
  static const Set avx2 = avx2_set();
  static const Set avx512 = ops_isa_supported(OpsIsa::avx512) ? avx512_set() : avx2;
  return isa == OpsIsa::avx512 && ops_isa_supported(OpsIsa::avx512) ? avx512 : avx2;
}

}  // namespace

template <typename T>
const NormRows<T>& norm_rows(OpsIsa isa) {
  return choose(isa, norm_rows_avx2<T>, norm_rows_avx512<T>);
}
template <typename T>
const ActRows<T>& act_rows(OpsIsa isa) {
  return choose(isa, act_rows_avx2<T>, act_rows_avx512<T>);
}
#define STRATA_ROW_SETS(T)                              \
  template const NormRows<T>& norm_rows<T>(OpsIsa isa); \
  template const ActRows<T>& act_rows<T>(OpsIsa isa);
STRATA_ROW_SETS(float)
STRATA_ROW_SETS(bf16)
STRATA_ROW_SETS(f16)
#undef STRATA_ROW_SETS

SoftmaxCeRow softmax_ce_row(OpsIsa isa) {
  return isa == OpsIsa::avx512 && ops_isa_supported(OpsIsa::avx512) ? softmax_ce_row_avx512() : softmax_ce_row_avx2();
}

}  // namespace strata::cpu
