// Host glue: checks views against the CPU contract, then launches.
#include "kernels/cuda_ops.h"

#include "core/error.h"
#include "kernels/launch.h"

namespace strata::cuda {

void residual_forward(TensorView out, TensorView a, TensorView b, void* stream) {
  STRATA_CHECK(a.numel() == out.numel() && b.numel() == out.numel() && a.dtype == out.dtype && b.dtype == out.dtype,
               "cuda::residual_forward: " + a.shape.str() + " + " + b.shape.str() + " -> " + out.shape.str(),
               "this is a bug in the caller: shapes and dtypes must agree");
  launch::residual(out.data, a.data, b.data, out.numel(), int(out.dtype), stream);
}

void cast(TensorView dst, TensorView src, void* stream) {
  STRATA_CHECK(dst.numel() == src.numel(), "cuda::cast: " + dst.shape.str() + " from " + src.shape.str(),
               "this is a bug in the caller: element counts must agree");
  launch::cast(dst.data, int(dst.dtype), src.data, int(src.dtype), src.numel(), stream);
}

}  // namespace strata::cuda
