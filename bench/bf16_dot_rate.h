// How many times the f32 multiply-add rate this CPU's bf16 dot products reach, measured on
// register-only loops (a few milliseconds): about 2 where each vdpbf16ps issues at the
// vfmadd231ps rate, about 0.5 where it issues at half that rate. A figure for the reports
// behind cpu/gemm_path.h's rule, which itself looks only at the CPU's features. Only where
// cpu::gemm_bf16_supported().
#pragma once

namespace strata::bench {

double bf16_dot_speedup();

}  // namespace strata::bench
