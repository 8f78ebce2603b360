// The trainer's optimizer: AdamW over the flat parameter buffer, one fused pass per
// parameter group through the vectorised CPU kernel (host/adam/adam.h). Groups carry their
// weight decay (matmul weights and embeddings decay; biases and norms do not).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "host/adam/adam.h"
#include "zero/zero_options.h"

namespace strata {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  host::AdamOptions kernel;     // ISA, threads, tile
  bool bias_correction = true;  // divide m and v by 1-β^t (DeepSpeed's bias_correction)
};

class AdamW {
 public:
  // Optimizer states m and v (in states.moments: f32, or bf16 rounded as states says; the
  // master is the caller's) come from the backend's budget, zeroed by the backend.
  AdamW(Backend& backend, int64_t num_params, AdamWConfig config, zero::StateFormat states = {});
  struct Group {
    int64_t offset, count;
    bool decay;
    int64_t index = 0;  // the model-flat index of element `offset` (16-bit states' rounding)
    // With a bf16 master: where this group's f32 master starts in the f32 masters' buffer
    // when it keeps one (StateFormat::master_of; -1: its master is the bf16 compute copy).
    int64_t master_at = -1;
  };
  // With a bf16 master, numbers the f32 masters that the groups without weight decay keep,
  // one after another (Group::master_at), and returns how many elements they take; with an
  // f32 master, 0.
  static int64_t place_f32_masters(std::vector<Group>& groups, const zero::StateFormat& states);
  // One step on device memory, by the backend's fused AdamW on its compute stream. With an
  // f32 master, params (the f32 master, by group offset) is updated in place and, if
  // compute_out is given, the updated parameters are also written there in compute_dtype
  // (bf16/f16) in the same pass. With a bf16 master, compute_out (bf16) is the master of
  // the groups with weight decay, updated in place, and params holds the others' f32 masters
  // (at Group::master_at), which write their copy into compute_out. grad_scale multiplies
  // every gradient first (clipping). t counts steps from 1. Gradients are f32, bf16 or f16
  // (grad_dtype). *nonfinite (a device i32, optional) is set when a gradient was not finite.
  void step(float* params, const void* grads, DType grad_dtype, void* compute_out, DType compute_dtype,
            std::span<const Group> groups, float lr, float grad_scale, int64_t t, int32_t* nonfinite = nullptr);
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }
  // The moments (device memory, in moment_dtype()), indexed like the parameters
  // (checkpoints read and restore them).
  void* m() { return m_.data(); }
  void* v() { return v_.data(); }
  DType moment_dtype() const { return fmt_.moments; }

 private:
  Backend& be_;
  AdamWConfig cfg_;
  zero::StateFormat fmt_;
  Buffer m_, v_;
};

}  // namespace strata
