// The shapes of one training step's ops, as a backend needs them to bound its op scratch
// before anything runs: `strata plan` and the engine's plan ask the backend
// (op_scratch_bytes in backend/device.h), so a kernel's scratch and the plan share one source.
#pragma once
#include <cstdint>

namespace strata {

struct OpShapes {
  int64_t batch = 0;         // B: sequences per micro-batch
  int64_t seq_len = 0;       // T
  int64_t width = 0;         // C: the residual stream's width
  int64_t widest = 0;        // the widest MLP activation: GPT-2's 4C, Llama's gate|up (2 × intermediate)
  int64_t n_head = 0;        // query heads
  int64_t head_dim = 0;      // per head
  int64_t qkv_width = 0;     // q|k|v together
  int64_t padded_vocab = 0;  // the LM head's columns
  int rope_tables = 1;       // distinct RoPEs (Gemma-3: the full and the sliding layers' own)
  int threads = 1;           // the device's threads (per-thread scratch on the CPU)
  int64_t rows() const { return batch * seq_len; }
};

}  // namespace strata
