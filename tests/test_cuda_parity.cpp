// Every CUDA kernel against its CPU reference (cpu/ops.h). Skipped, with the reason, on
// machines without a GPU; the code still compiles and links wherever nvcc is found.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/rng.h"
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_ops.h"

namespace strata {
namespace {

class CudaParity : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device here (" << why << ")";
  }
  template <typename T>
  T* to_device(const std::vector<T>& h) {
    void* d = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    STRATA_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    ptrs_.push_back(d);
    return static_cast<T*>(d);
  }
  template <typename T>
  std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    STRATA_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void TearDown() override {
    for (void* p : ptrs_) cudaFree(p);
  }
  std::vector<void*> ptrs_;
};

std::vector<float> values(size_t n) {
  NormalRng r(3, 0);
  std::vector<float> v(n);
  for (auto& x : v) x = 100.0f * r.next();
  v[0] = INFINITY, v[1] = -INFINITY, v[2] = NAN, v[3] = 65520.0f, v[4] = 0x1p-25f;
  return v;
}

TEST_F(CudaParity, CastMatchesCpuBitForBit) {
  const size_t n = 100003;
  auto h = values(n);
  float* d = to_device(h);
  for (DType t : {DType::bf16, DType::f16}) {
    std::vector<uint16_t> ref(n);
    cpu::cast({ref.data(), t, {int64_t(n)}}, {h.data(), DType::f32, {int64_t(n)}});
    uint16_t* dout = to_device(std::vector<uint16_t>(n));
    cuda::cast({dout, t, {int64_t(n)}}, {d, DType::f32, {int64_t(n)}}, nullptr);
    auto got = to_host(dout, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], ref[i]) << dtype_name(t) << " element " << i << " = " << h[i];
  }
}

TEST_F(CudaParity, ResidualMatchesCpu) {
  const size_t n = 4099;
  auto a = values(n), b = values(n);
  std::vector<float> ref(n);
  cpu::residual_forward({ref.data(), DType::f32, {int64_t(n)}}, {a.data(), DType::f32, {int64_t(n)}},
                        {b.data(), DType::f32, {int64_t(n)}});
  float* dout = to_device(std::vector<float>(n));
  cuda::residual_forward({dout, DType::f32, {int64_t(n)}}, {to_device(a), DType::f32, {int64_t(n)}},
                         {to_device(b), DType::f32, {int64_t(n)}}, nullptr);
  auto got = to_host(dout, n);
  for (size_t i = 0; i < n; ++i)
    if (!std::isnan(ref[i]) || !std::isnan(got[i])) {
      ASSERT_EQ(got[i], ref[i]) << i;
    }
}

}  // namespace
}  // namespace strata
